"""The private Lightning details this package relies on, in one place, each failing loudly when missing: the
package then warns with :class:`LightningInternalsWarning` (an error under the test suite) and takes the safe path.
``make test-lightning-latest`` runs their tests against the newest Lightning on the package index.

1. ``LightningCLI._parse_ckpt_path``, overridden by ``EmbinitCLI`` (``commands/lightning_cli.py``; Lightning offers no
   public hook to adjust the model configuration read from ``--ckpt_path``), whose call is checked in
   ``before_instantiate_classes``;
2. how Lightning re-creates a ``BatchSampler`` subclass around its ``DistributedSampler`` and calls ``set_epoch`` on
   ``batch_sampler.sampler`` (``data/batching.py``): the 2-process DDP tests of the data modules fail if it changes.

The callbacks' resume handling uses public API only (:mod:`lightning_embinit.callbacks.lifecycle`).
"""


class LightningInternalsWarning(UserWarning):
    """A private Lightning detail the package relies on is missing; it fell back to a safe path."""
