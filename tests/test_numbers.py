"""The one rule for a figure in a sentence (k3lib.core.numbers.figure)."""

import pytest

from k3lib.core.numbers import figure


@pytest.mark.parametrize("value, text", [
    (24.234, "24.2"), (729.952, "730"), (0.016342, "0.0163"), (3.0, "3"), (256, "256"), (1.5, "1.5"),
    (-12.345, "-12.3"), (12345.6, "12,346"), (0.00001234, "0.0000123"), (99.95, "100"),
    (1890.4, "1,890"), (1.89e3, "1,890"), (4096, "4096"), (200_000, "200,000"),  # 1,890 ms; a year, a port bare
])
def test_a_figure_keeps_the_digits_a_person_reads(value, text):
    assert figure(value) == text


def test_what_is_not_a_finite_number_is_written_as_it_is():
    assert [figure(v) for v in (None, True, "n/a", float("nan"))] == ["None", "True", "n/a", "nan"]
    assert figure(729.952, "/min") == "730/min" and figure(None, " ms") == "None ms"
