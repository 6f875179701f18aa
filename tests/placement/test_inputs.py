"""The shared input checks of placement.inputs: numbers, counts, prices, and the user-file loader."""

from __future__ import annotations

import pytest

from placement.errors import InputError
from placement.inputs import finite_number, non_negative_price, positive_int, shown

NON_FINITE = ["inf", "Infinity", "-inf", "1e999", "nan", "NaN", float("inf"), float("nan"), 10**400]


@pytest.mark.parametrize("value", NON_FINITE)
def test_non_finite_numbers_are_refused_naming_the_field(value: object) -> None:
    with pytest.raises(InputError) as err:
        finite_number(value, "Price (line 3)", source="x.csv")
    assert str(err.value).startswith("x.csv: Price (line 3): must be")


@pytest.mark.parametrize("value", [True, False, None, "", " ", "abc", [1], {"a": 1}])
def test_non_numbers_and_booleans_are_refused(value: object) -> None:
    with pytest.raises(InputError, match="must be"):
        finite_number(value, "limit")


@pytest.mark.parametrize("value", [0, "0", -8, "-8", 0.5, "0.5", 1e300, True, "inf"])
def test_counts_are_positive_whole_numbers(value: object) -> None:
    with pytest.raises(InputError):
        positive_int(value, "AcceleratorCount")


@pytest.mark.parametrize(("value", "expected"), [(8, 8), (8.0, 8), ("8", 8), (" 16 ", 16), ("8.0", 8)])
def test_counts_accept_whole_numbers_in_any_spelling(value: object, expected: int) -> None:
    assert positive_int(value, "gpus") == expected


@pytest.mark.parametrize("value", [-0.01, "-1", "inf", "nan"])
def test_prices_are_finite_and_not_negative(value: object) -> None:
    with pytest.raises(InputError):
        non_negative_price(value, "SpotPrice")


def test_prices_accept_zero_and_strings() -> None:
    assert non_negative_price("0", "Price") == 0.0
    assert non_negative_price("12.5", "Price") == 12.5
    assert str(non_negative_price("-0", "Price")) == "0.0"


def test_values_quoted_in_errors_are_cut_short() -> None:
    with pytest.raises(InputError) as err:
        finite_number("x" * 1_000_000, "gpus")
    assert len(str(err.value)) < 120
    assert shown("y" * 500).endswith("...")
