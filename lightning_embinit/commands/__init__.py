"""The commands: ``embinit`` (``main``), its LightningCLI (``lightning_cli``), ``inspect`` (with ``inspect_models``),
``sweep``/``report`` (``study``), ``translate``/``generate``/``classify``/``transplant`` (``use``) and the quick start.

Each module is imported on use; this package imports none of them, so ``embinit --help`` stays fast.
"""
