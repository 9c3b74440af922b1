"""`tokens.toml` as a trust boundary (API.md "Tokens"): `read_tokens` refuses a file
others may read, a token or a name listed twice, and any scope that is not exactly
`operator`, `metrics` or `tenant:<id in the tree>`, naming the file and the line of the
`[[token]]` table at fault. Through real `pool serve` processes:
tests/reliability/test_tokens_and_metrics_access.py.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from joulepool.errors import InvalidInput, InvalidTokens
from joulepool.service.tokens import (
    Principal,
    TokenBook,
    TokenEntry,
    add_token,
    bridge_scope,
    check_scope,
    read_tokens,
)
from joulepool.tree import Entitlement, Tree

TREE = Tree(
    [
        Entitlement("research", 0, 0, 0),
        Entitlement("vision", 10, 1, 1, parent="research"),
        Entitlement("language", 10, 1, 1, parent="research"),
    ]
)
A, B, C = (hashlib.sha256(t).hexdigest() for t in (b"a", b"b", b"c"))


def table(name: str, sha256: str, scope: str) -> str:
    return f'[[token]]\nname = "{name}"\nsha256 = "{sha256}"\nscope = "{scope}"\n'


def tokens_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "tokens.toml"
    path.write_bytes(text.encode("utf-8"))
    os.chmod(path, mode)
    return path


def refused(path: Path, tree: Tree = TREE) -> InvalidTokens:
    with pytest.raises(InvalidTokens) as info:
        read_tokens(path, tree)
    assert str(path) in str(info.value) and info.value.code == "invalid_tokens"
    assert isinstance(info.value, InvalidInput)  # typed, catchable as invalid input
    return info.value


def test_a_good_file_reads_back_every_scope(tmp_path: Path) -> None:
    text = (
        "# comment\n"
        + table("ops", A, "operator")
        + "\n"
        + table("scraper", B, "metrics")
        + table("vision", C, "tenant:vision")
    )
    assert read_tokens(tokens_file(tmp_path, text), TREE) == [
        TokenEntry("ops", A, "operator"),
        TokenEntry("scraper", B, "metrics"),
        TokenEntry("vision", C, "tenant:vision"),
    ]
    assert read_tokens(tmp_path / "absent.toml", TREE) == []  # no file: every request 401


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o666, 0o602, 0o620, 0o700])
def test_a_file_group_or_others_may_read_or_change_is_refused(tmp_path: Path, mode: int) -> None:
    path = tokens_file(tmp_path, table("ops", A, "operator"), mode)
    if mode & 0o077:
        error = refused(path)
        assert f"mode {mode:04o}" in str(error) and f"chmod 600 {path}" in str(error)
        assert error.line is None
    else:
        assert len(read_tokens(path, TREE)) == 1
    os.chmod(path, 0o400)
    assert len(read_tokens(path, TREE)) == 1


@pytest.mark.parametrize("second_scope", ["operator", "tenant:vision", "metrics"])
def test_a_sha256_listed_twice_is_refused_whatever_the_scopes(
    tmp_path: Path, second_scope: str
) -> None:
    # The finding: a tenant's hash listed again as operator silently made the tenant an operator.
    text = table("vision", A, "tenant:vision") + table("escalated", A, second_scope)
    error = refused(tokens_file(tmp_path, text))
    assert error.line == 5 and "listed already at line 1" in str(error)
    assert str(error).startswith(f"{tmp_path / 'tokens.toml'}:5: ")


def test_a_name_listed_twice_is_refused(tmp_path: Path) -> None:
    text = table("ops", A, "operator") + "\n\n" + table("ops", B, "metrics")
    error = refused(tokens_file(tmp_path, text))
    assert error.line == 7 and "'ops' is taken already at line 1" in str(error)


@pytest.mark.parametrize(
    ("scope", "said"),
    [
        ("tenant:visoin", "names entitlement 'visoin', which is not in the tree; did you mean"),
        ("tenant:nobody", "names entitlement 'nobody', which is not in the tree"),
        ("tenant:vision ", "stray characters"),
        (" tenant:vision", "stray characters"),
        ("tenant: vision", "stray characters"),
        ("tenant:vision\\t", "stray characters"),
        ("tenant:vision\\n", "stray characters"),
        ("tenant:vision\\u200b", "stray characters"),  # zero-width space
        ("tenant:vision\\u202e", "stray characters"),  # right-to-left override
        ("operator ", "stray characters"),
        ("metrics\\u0000", "stray characters"),
        ("Operator", "is not a scope"),
        ("METRICS", "is not a scope"),
        ("tenant:", "names no entitlement"),
        ("tenant", "is not a scope"),
        ("admin", "is not a scope"),
        ("bridge:visoin", "did you mean 'bridge:vision'?"),
        ("bridge:", "names no entitlement"),
        ("Bridge", "is not a scope"),
        ("bridge ", "stray characters"),
        ("bridge:vision\u202e", "stray characters"),
        ("bridges", "is not a scope"),
    ],
)
def test_a_scope_must_be_exact_and_name_an_entitlement_in_the_tree(
    tmp_path: Path, scope: str, said: str
) -> None:
    text = table("ops", A, "operator") + table("bad", B, scope)
    error = refused(tokens_file(tmp_path, text))
    assert error.line == 5 and said in str(error), str(error)


def test_a_stray_scope_suggests_the_one_meant(tmp_path: Path) -> None:
    error = refused(tokens_file(tmp_path, table("v", A, "tenant:vision ")))
    assert "did you mean 'tenant:vision'?" in str(error)
    error = refused(tokens_file(tmp_path, table("v", A, "tenant:visoin")))
    assert "did you mean 'tenant:vision'?" in str(error)


def test_a_scope_is_checked_against_the_tree_given(tmp_path: Path) -> None:
    path = tokens_file(tmp_path, table("ops", A, "operator") + table("l", B, "tenant:language"))
    assert len(read_tokens(path, TREE)) == 2
    without = Tree([e for e in TREE if e.id != "language"])  # the tree a reload would bring
    error = refused(path, without)
    assert error.line == 5 and "'language', which is not in the tree" in str(error)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ('[[token]]\nname = "x"\nsha256 = "' + A + '"\n', "missing 'scope'"),
        (table("x", A, "operator") + 'owner = "me"\n', "unknown key 'owner'"),
        (table("x", A.upper(), "operator"), "64 lowercase hex"),
        (table("x", A[:-1], "operator"), "64 lowercase hex"),
        ('[[token]]\nname = "x"\nsha256 = "' + A + '"\nscope = 1\n', "scope must be"),
        (table("", A, "operator"), "name must be"),
        (table("x ", A, "operator"), "stray characters"),
        (table("x\\u001b[31m", A, "operator"), "stray characters"),
    ],
)
def test_a_malformed_table_is_refused_at_its_line(tmp_path: Path, body: str, said: str) -> None:
    text = table("ops", B, "operator") + "# then\n" + body
    error = refused(tokens_file(tmp_path, text))
    assert error.line == 6 and said in str(error), str(error)


def test_line_numbers_survive_the_ways_toml_writes_a_header(tmp_path: Path) -> None:
    text = (
        "# Bearer tokens\r\n"
        '  [[ token ]]   # indented, blanks inside\r\n name = "a"\r\n'
        f' sha256 = "{A}"\r\n scope = "operator"\r\n'
        "\r\n"
        f'[["token"]]\r\nname = "b"\r\nsha256 = "{B}"\r\nscope = "metrics"\r\n'
        f"[['token']]\r\nname = 'c'\r\nsha256 = '{C}'\r\nscope = 'tenant:nobody'\r\n"
    )
    assert refused(tokens_file(tmp_path, text)).line == 11


def test_a_header_inside_a_multi_line_string_is_not_a_table(tmp_path: Path) -> None:
    text = (
        table("ops", A, "operator")
        + '[[token]]\nname = """\n[[token]]\n"""\n'
        + f'sha256 = "{B}"\nscope = "metrics"\n'
    )
    error = refused(tokens_file(tmp_path, text))
    assert error.line == 5 and "stray characters" in str(error)  # the name holds newlines


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (f'token = [{{name = "a", sha256 = "{A}", scope = "operator"}}]\n', "[[token]] table"),
        ('[token]\nname = "a"\n', "[[token]] table"),
        ('[[tokens]]\nname = "a"\n', "only [[token]] tables"),
        ("[[token]\n", "not valid TOML"),
    ],
)
def test_anything_but_token_tables_is_refused(tmp_path: Path, text: str, said: str) -> None:
    error = refused(tokens_file(tmp_path, text))
    assert said in str(error), str(error)


def test_an_unreadable_or_odd_file_is_a_typed_refusal(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_bytes(b"\xff\xfe")
    path.chmod(0o600)
    assert "not UTF-8" in str(refused(path))
    path.unlink()
    os.mkfifo(path, 0o600)  # would block an open without O_NONBLOCK
    assert "not a regular file" in str(refused(path))
    path.unlink()
    path.mkdir(mode=0o700)
    refused(path)


def test_add_token_writes_0600_and_checks_the_scope_against_the_tree(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    token = add_token(path, "scraper", "metrics", TREE)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    (entry,) = read_tokens(path, TREE)
    assert entry == TokenEntry("scraper", hashlib.sha256(token.encode()).hexdigest(), "metrics")
    before = path.read_bytes()
    for scope in ("tenant:visoin", "tenant:vision ", "Operator"):
        with pytest.raises(InvalidInput, match="scope"):
            add_token(path, "x", scope, TREE)
    for name in ("scraper", " x", "x\n"):
        with pytest.raises(InvalidInput, match="name"):
            add_token(path, name, "operator", TREE)
    assert path.read_bytes() == before


def test_add_token_refuses_a_file_others_may_read_and_leaves_it(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    add_token(path, "ops", "operator", TREE)
    path.chmod(0o644)
    before = path.read_bytes()
    with pytest.raises(InvalidTokens, match="mode 0644"):
        add_token(path, "more", "operator", TREE)
    assert path.read_bytes() == before and stat.S_IMODE(path.stat().st_mode) == 0o644


def test_check_scope_takes_exactly_the_documented_forms() -> None:
    for scope in (
        "operator",
        "metrics",
        "tenant:research",
        "tenant:vision",
        "bridge",
        "bridge:research",
        "bridge:vision",
    ):
        assert check_scope(scope, TREE) == scope
    with pytest.raises(InvalidInput, match="not in the tree"):
        check_scope("tenant:robotics", TREE)
    with pytest.raises(InvalidInput, match="not in the tree"):
        check_scope("bridge:robotics", TREE)


def test_a_bridge_principal_acts_on_its_subtree_as_an_operator_names_claims() -> None:
    vision = Principal("slurm", "bridge:vision")
    assert vision.bridge and vision.subtree == "vision"
    assert vision.tenant is None and not vision.operator and not vision.metrics_only
    assert [e.id for e in TREE if vision.may_act_on(TREE, e.id)] == ["vision"]
    whole = Principal("slurm", "bridge")
    assert whole.bridge and whole.subtree is None
    assert all(whole.may_act_on(TREE, e.id) for e in TREE)
    assert not whole.may_act_on(TREE, "nobody")
    assert not Principal("t", "tenant:vision").bridge


def test_the_bridge_scope_for_mapped_entitlements_is_their_smallest_subtree() -> None:
    assert bridge_scope(TREE, ["vision"]) == "bridge:vision"
    assert bridge_scope(TREE, ["vision", "language"]) == "bridge:research"
    assert bridge_scope(TREE, ["vision", "research"]) == "bridge:research"
    assert bridge_scope(TREE, []) == "bridge"
    two_roots = Tree([*TREE, Entitlement("other", 0, 0, 0)])
    assert bridge_scope(two_roots, ["vision", "other"]) == "bridge"
    with pytest.raises(InvalidInput, match="'nobody' is not in the tree"):
        bridge_scope(TREE, ["vision", "nobody"])


def test_a_metrics_principal_acts_on_nothing() -> None:
    scraper = Principal("scraper", "metrics")
    assert scraper.metrics_only and not scraper.operator and scraper.tenant is None
    assert not any(scraper.may_act_on(TREE, e.id) for e in TREE)
    research = Principal("r", "tenant:research")
    assert research.tenant == "research" and not research.metrics_only
    assert all(research.may_act_on(TREE, e.id) for e in TREE)
    book = TokenBook([TokenEntry("scraper", hashlib.sha256(b"t").hexdigest(), "metrics")])
    assert book.principal("t") == scraper and book.principal("u") is None
