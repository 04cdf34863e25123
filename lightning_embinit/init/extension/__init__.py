"""New tokens in a trained model (:func:`extend_vocabulary`): the plan, the rules for new rows, the tensors read and
written, the report, and a trained model's checkpoint, each in its module."""

from lightning_embinit.init.extension.extend import extend_vocabulary, freeze_old_rows, pin_old_rows, plan_for_module
from lightning_embinit.init.extension.plan import ExtensionPlan, VocabularyChange
from lightning_embinit.init.extension.report import extension_metrics, format_extension_report

__all__ = [
    "ExtensionPlan",
    "VocabularyChange",
    "extend_vocabulary",
    "extension_metrics",
    "format_extension_report",
    "freeze_old_rows",
    "pin_old_rows",
    "plan_for_module",
]
