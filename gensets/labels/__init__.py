"""Label spaces and label matching (no torch imports here)."""

from .wordset import BORJI_CATEGORIES, borji_category_ids, wordset_hit, wordset_targets

__all__ = ["BORJI_CATEGORIES", "borji_category_ids", "wordset_hit", "wordset_targets"]
