"""The staleness rule's token mask: the bound counted per generated token (rollout.staleness_unit=token)."""
import pytest

from actors.training.staleness import stale_token_mask


def test_token_unit_masks_generated_tokens_beyond_the_bound_and_leaves_the_prompt():
    # Trained at version 5 with a bound of 2: version 3 is exactly at the bound (kept), 2 is one beyond.
    mask = stale_token_mask([0, 0, 1, 1, 1, 0, 1, 1], [-1, -1, 2, 2, 3, -1, 4, 5], version=5, max_staleness=2)
    assert mask == [0, 0, 0, 0, 1, 0, 1, 1]
    assert stale_token_mask([0, 1], [-1, 0], version=0, max_staleness=0) == [0, 1]  # on-policy: kept
    with pytest.raises(ValueError, match="staleness_unit=trajectory"):
        stale_token_mask([0, 1, 1], [-1, 0], version=0, max_staleness=0)
