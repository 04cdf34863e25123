"""The special-token ids a model's configs hold (``bos_token_id``, ``eos_token_id``, ``pad_token_id``,
``decoder_start_token_id``, …, in its ``config`` and ``generation_config``) follow a transplant: a role's id becomes
the new tokenizer's token of that role; any other id the new id of the token matched to the old one; None when the
new vocabulary has neither."""

from __future__ import annotations

from typing import Any

from torch import nn

_ROLE_OF_KEY = {f"{role}_token_id": role for role in ("bos", "eos", "pad", "unk", "sep", "cls", "mask")}


def _configs(module: nn.Module) -> list[Any]:
    """Every Hugging Face config (and generation config) of the models inside ``module``, each once."""
    found: dict[int, Any] = {}
    for part in module.modules():
        for name in ("config", "generation_config"):
            config = getattr(part, name, None)
            if config is not None and callable(getattr(config, "to_dict", None)):
                found.setdefault(id(config), config)
                text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else None
                if text is not None:
                    found.setdefault(id(text), text)
    return list(found.values())


def follow_config_ids(module: nn.Module, match: Any, new: Any, old: Any) -> dict[str, tuple[Any, Any]]:
    """Rewrite the ``*_token_id`` entries of ``module``'s configs (module doc); returns key → (old, new) of each that
    changed."""
    new_index = {token: i for i, token in enumerate(new.tokens)}
    role_ids = {role: new_index[token] for role, token in new.special.items() if token in new_index}
    moved_to: dict[int, int] = {}
    for new_id, (source, kind) in enumerate(zip(match.source_ids.tolist(), match.kinds)):
        if source >= 0 and (source not in moved_to or kind == "special"):
            moved_to[source] = new_id
    changed: dict[str, tuple[Any, Any]] = {}
    for config in _configs(module):
        for key, value in config.to_dict().items():
            if not key.endswith("_token_id") or not (value is None or isinstance(value, (int, list))):
                continue
            role = _ROLE_OF_KEY.get(key)

            def follow(old_id: int | None, role: str | None = role) -> int | None:
                if role in role_ids:
                    return role_ids[role]
                return None if old_id is None else moved_to.get(int(old_id))

            if isinstance(value, list):
                followed: Any = [i for i in (follow(v) for v in value) if i is not None] or None
            else:
                followed = follow(value)
            if followed != value and (value is not None or role in role_ids):
                setattr(config, key, followed)
                changed[f"{type(config).__name__}.{key}"] = (value, followed)
    return changed
