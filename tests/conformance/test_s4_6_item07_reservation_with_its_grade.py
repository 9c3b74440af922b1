"""§7 item 7: report a reservation together with the grade it rests on (§3, §4.6)."""

import pytest

from joulepool.admission import Admit, decide
from joulepool.grade import Grade
from joulepool.tree import Usage
from tests.support.builders import claim, spend, team_tree


@pytest.mark.parametrize("grade", list(Grade))
def test_an_admission_reserves_the_whole_estimate_at_its_grade(grade: Grade) -> None:
    tree = team_tree(g=1000)
    verdict = decide(tree, Usage(tree), claim("c1", "a", 700, grade, gang=2, per_member=2))
    assert isinstance(verdict, Admit)
    assert verdict.to_json() == {
        "verdict": "admit",
        "reserved": {"uj": 700, "grade": grade.value},
        "devices": 4,
        "borrowed_uj": 0,
    }


def test_a_borrowing_admission_says_how_much_of_it_was_borrowed() -> None:
    tree = team_tree(g=1000)
    usage = spend(Usage(tree), "a", 900)
    verdict = decide(tree, usage, claim("c1", "a", 300, Grade.ModelBased))
    assert verdict == Admit(claim("x", "a", 300, Grade.ModelBased).estimate, 1, 200)


def test_borrowed_counts_only_the_new_borrowing() -> None:
    tree = team_tree(g=1000)
    usage = spend(Usage(tree), "a", 1100)  # already 100 past the guarantee
    verdict = decide(tree, usage, claim("c1", "a", 50, Grade.HwShunt))
    assert isinstance(verdict, Admit)
    assert verdict.borrowed_uj == 50
