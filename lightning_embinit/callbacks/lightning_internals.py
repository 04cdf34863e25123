"""The private Lightning details this package relies on, in one place, each failing loudly when missing.

Lightning offers no public hook to adjust the model configuration that LightningCLI reads from ``--ckpt_path``.
Where such a detail is missing in a Lightning release, the package warns with :class:`LightningInternalsWarning`
(an error under the test suite) and takes the safe path; it never skips work silently.

The details, each covered by tests that ``make test-lightning-latest`` runs against the newest Lightning on the
package index:

1. ``LightningCLI._parse_ckpt_path``, overridden by ``EmbinitCLI`` (``lightning_cli.py``), whose call is checked in
   ``before_instantiate_classes``;
2. how Lightning re-creates a ``BatchSampler`` subclass around its ``DistributedSampler`` and calls ``set_epoch`` on
   ``batch_sampler.sampler`` (``data/batching.py``): documented behaviour of ``use_distributed_sampler``, but the
   re-creation itself is internal; the 2-process DDP tests of the data modules fail if it changes (no rank would get
   a disjoint share).

The callbacks' resume handling uses public API only (:mod:`lightning_embinit.callbacks.lifecycle`).
"""


class LightningInternalsWarning(UserWarning):
    """A private Lightning detail the package relies on is missing; it fell back to a safe path."""
