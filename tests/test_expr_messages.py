"""contract.config.expr: the out-of-range and non-finite messages in full (mutation testing, docs/testing.md)."""

from __future__ import annotations

import pytest

from contract.config.expr import parse_number


@pytest.mark.parametrize(
    "text, message",
    [
        ("1e300**2", "'1e300**2' is out of range"),  # OverflowError
        ("(-8)**0.5", "'(-8)**0.5' is out of range"),  # a complex power
        ("1e308*10", "'1e308*10' is not finite"),  # inf without an exception
        (" 1e308+1e308 ", "'1e308+1e308' is not finite"),  # the text is quoted stripped
    ],
)
def test_range_messages(text, message):
    with pytest.raises(ValueError) as info:
        parse_number(text)
    assert str(info.value) == message
