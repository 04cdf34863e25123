"""The package's headline study, ``examples/studies/headline.yaml``, as the package ships it, so that the installed
package runs the quick start without the repository.

[K]'s finding on [S]'s model (docs/concepts.md#transforms, #tied-head): a pre-trained start whose spread is far from
Xavier's hurts; standardized to Xavier's std it does not (the Headline section of docs/results.md describes its
trials). The package holds the study and its base config (``examples/configs/tied_lm.yaml``) as data, in
``studies/shipped/`` (in a clone, links to the files in ``examples/``; in the wheel, their copies): written once.
"""

from __future__ import annotations

from importlib.resources import as_file, files

from lightning_embinit.studies.spec import Study

#: The metrics the quick start prints: the outcome, the init report and the start-of-training diagnostics.
HEADLINE_METRICS = (
    "best_val_loss",
    "init_loss",
    "init_loss_predicted",
    "init_loss_random_tokens",
    "embinit/tokens/std",
    "embinit/tokens/top_share",
    "embinit/tokens/ratio",
    "embvar/tokens/semantic_retention_at_start",
    "embvar/tokens/positional_retention_at_start",
)

SHIPPED = "shipped/studies/headline.yaml"
"""The headline study inside the package (``lightning_embinit.studies``), its base config beside it as in
``examples/``."""


def headline_study() -> Study:
    """The headline study (``examples/studies/headline.yaml``): its settings, claims and variants (``smoke``: about a
    minute on 2 cores, ``medium``, ``full``) as the file gives them."""
    with as_file(files("lightning_embinit.studies").joinpath(SHIPPED)) as path:
        return Study.from_yaml(path)
