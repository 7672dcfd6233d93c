"""contract.config.expr.parse_number: exact values, bounds and error messages (mutation-tested).

tests/test_config.py checks a few sample expressions; these tests pin every
branch: the property tests build random expressions together with their value
computed independently (Python's own operators on the same operands), so any
change to an operator, a bound or an error text fails a test.
"""

from __future__ import annotations

import operator

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from contract.config.expr import parse_number

# Deterministic and free of timing limits: the same examples every run, also
# under mutmut's slower trampolines.
FAST = settings(max_examples=150, deadline=None, derandomize=True)

ONLY = "may only contain numbers, + - * / ** and parentheses"


# --- values ------------------------------------------------------------------


@FAST
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_any_finite_float_round_trips_through_its_repr(x):
    # repr(-1.5) is "-1.5": negative numbers go through the unary minus.
    assert parse_number(repr(x)) == x
    assert parse_number(f"  {x!r}\t") == x
    assert parse_number(f"+{x!r}") == x


@FAST
@given(st.integers(min_value=-(10**30), max_value=10**30))
def test_any_integer_literal_is_its_float(n):
    result = parse_number(str(n))
    assert type(result) is float
    assert result == float(n)
    assert parse_number(n) == float(n) and type(parse_number(n)) is float


def _leaf():
    return st.one_of(
        st.integers(min_value=0, max_value=99).map(lambda n: (str(n), n)),
        st.sampled_from([0.5, 0.25, 1.5, 2.0, 1e3, 4.12e9, 3e-7]).map(lambda x: (repr(x), x)),
    )


_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "**": operator.pow}
ZERO_DIVISION = "division by zero"
TOO_BIG = "too big"  # the reference itself overflows: such examples are skipped


def _apply(op, left, right):
    """The reference value of ``(left) op (right)``, or why there is none."""
    if isinstance(left, str) or isinstance(right, str):
        return left if isinstance(left, str) else right
    try:
        value = _OPS[op](left, right)
        return TOO_BIG if abs(value) > 1e300 else value
    except ZeroDivisionError:
        return ZERO_DIVISION
    except OverflowError:
        return TOO_BIG


def _extend(children):
    binary = st.tuples(st.sampled_from(["+", "-", "*", "/"]), children, children).map(
        lambda t: (f"({t[1][0]}){t[0]}({t[2][0]})", _apply(t[0], t[1][1], t[2][1]))
    )
    negate = children.map(lambda c: (f"-({c[0]})", c[1] if isinstance(c[1], str) else -c[1]))
    power = st.tuples(children, st.integers(min_value=0, max_value=3)).map(
        lambda t: (f"({t[0][0]})**{t[1]}", _apply("**", t[0][1], t[1]))
    )
    return st.one_of(binary, negate, power)


# (text, value): value is the number, or ZERO_DIVISION / TOO_BIG.
EXPRESSIONS = st.recursive(_leaf(), _extend, max_leaves=8)


@FAST
@given(EXPRESSIONS)
def test_random_arithmetic_matches_pythons_operators(case):
    text, value = case
    assume(value != TOO_BIG)
    if len(text) > 200:
        with pytest.raises(ValueError, match="^expected a number or an arithmetic expression$"):
            parse_number(text)
    elif value == ZERO_DIVISION:
        with pytest.raises(ValueError) as info:
            parse_number(text)
        assert str(info.value) == f"division by zero in {text!r}"
    else:
        assert parse_number(text) == float(value)


@pytest.mark.parametrize(
    "text, value",
    [
        ("-2**2", -4.0),  # ** binds tighter than unary minus
        ("--3", 3.0),
        ("+-3", -3.0),
        ("2**3**2", 512.0),  # right-associative
        ("7/2", 3.5),
        ("7-2-1", 4.0),
        ("2*512*0.33e9", 2 * 512 * 0.33e9),
        ("1_000", 1000.0),
        ("2**64", 2.0**64),  # the largest exponent allowed ...
        ("2**-64", 2.0**-64),
        ("(-2)**64", 2.0**64),
        ("0.5**64", 0.5**64),
        ("1" * 200, float(int("1" * 200))),  # ... and the longest text
        (" " * 300 + "3", 3.0),  # length is counted after stripping
    ],
)
def test_exact_values(text, value):
    result = parse_number(text)
    assert type(result) is float
    assert result == value


# --- rejections and their messages ---------------------------------------------


@pytest.mark.parametrize(
    "value, message",
    [
        (True, "a boolean is not a number"),
        (False, "a boolean is not a number"),
        (None, "expected a number, got NoneType"),
        ([1], "expected a number, got list"),
        (b"1", "expected a number, got bytes"),
        ("", "expected a number or an arithmetic expression"),
        ("   ", "expected a number or an arithmetic expression"),
        ("1" * 201, "expected a number or an arithmetic expression"),
        ("2*", "'2*' is not a number or arithmetic expression"),
        ("(1", "'(1' is not a number or arithmetic expression"),
        ("2**65", "exponent too large in '2**65'"),
        ("2**-65", "exponent too large in '2**-65'"),
        ("2**64.5", "exponent too large in '2**64.5'"),
        ("1+2**(60+5)", "exponent too large in '1+2**(60+5)'"),
        ("1/0", "division by zero in '1/0'"),
        ("1/(2-2)", "division by zero in '1/(2-2)'"),
        ("0**-1", "division by zero in '0**-1'"),
        ("-(1/0)", "division by zero in '-(1/0)'"),
        ("x", f"'x' {ONLY}"),
        ("x+1", f"'x+1' {ONLY}"),  # the whole text is named, whichever operand is wrong
        ("1+x", f"'1+x' {ONLY}"),
        ("-x", f"'-x' {ONLY}"),
        ("-(2*x)", f"'-(2*x)' {ONLY}"),
        ("~1", f"'~1' {ONLY}"),
        ("not 1", f"'not 1' {ONLY}"),
        ("7%2", f"'7%2' {ONLY}"),
        ("7//2", f"'7//2' {ONLY}"),
        ("1<<3", f"'1<<3' {ONLY}"),
        ("abs(3)", f"'abs(3)' {ONLY}"),
        ("True", f"'True' {ONLY}"),
        ("True+1", f"'True+1' {ONLY}"),
        ("1j", f"'1j' {ONLY}"),
        ("'a'*3", f"\"'a'*3\" {ONLY}"),
        ("[1]", f"'[1]' {ONLY}"),
        ("__import__('os')", f"\"__import__('os')\" {ONLY}"),
    ],
)
def test_rejections_say_why(value, message):
    with pytest.raises(ValueError) as info:
        parse_number(value)
    assert str(info.value) == message


@FAST
@given(st.integers(min_value=65, max_value=10**6), st.booleans())
def test_exponents_beyond_64_are_refused_whatever_the_sign(exponent, negative):
    text = f"2**{'-' if negative else ''}{exponent}"
    with pytest.raises(ValueError) as info:
        parse_number(text)
    assert str(info.value) == f"exponent too large in {text!r}"


@FAST
@given(st.integers(min_value=-64, max_value=64))
def test_exponents_up_to_64_are_computed(exponent):
    assert parse_number(f"2**{exponent}") == 2.0**exponent


@pytest.mark.parametrize("text", ["1e300**2", "(10**64)**64", "(-8)**0.5", "1e999", "1e308*10"])
def test_out_of_range_results_are_value_errors(text):
    with pytest.raises(ValueError):
        parse_number(text)
