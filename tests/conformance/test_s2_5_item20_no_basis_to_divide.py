"""§7 item 20: refuse to attribute a device with no occupants or no weight (§2.5)."""

import pytest

from joulepool.attribution import attribute
from joulepool.errors import AttributionRefused
from joulepool.grade import Energy
from tests.support.builders import H


def test_no_occupants_is_refused() -> None:
    with pytest.raises(AttributionRefused) as info:
        attribute(Energy(50, H), {})
    assert info.value.error == "no_occupants"


def test_all_zero_weights_are_refused() -> None:
    with pytest.raises(AttributionRefused) as info:
        attribute(Energy(50, H), {"a": 0, "b": 0})
    assert info.value.error == "no_weight"


def test_a_zero_total_with_a_basis_is_attributed_not_refused() -> None:
    assert attribute(Energy(0, H), {"a": 1}) == {"a": Energy(0, H)}
