"""Webhook signing secrets in the store, on every backend (issue 16): create, read, list
(one owner's or everyone's), rotate with a grace period during which both sign, delete;
a name is per owner, a miss is NotFound and a taken name Conflict."""

from __future__ import annotations

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.errors import Conflict, NotFound
from jobctl.store.base import Store, secrets_of


def test_a_secret_is_created_read_and_listed_per_owner(store: Store, clock: FakeClock) -> None:
    part = secrets_of(store)
    made = part.create_secret(1000, "default", "whsec_a")
    part.create_secret(1000, "hooks", "whsec_b")
    part.create_secret(1001, "default", "whsec_c")
    assert made.secret == "whsec_a" and made.owner_uid == 1000 and made.name == "default"
    assert made.rotated_at is None and made.previous is None
    assert part.get_secret(1000, "default") == made
    assert [s.name for s in part.list_secrets(1000)] == ["default", "hooks"]
    assert [(s.owner_uid, s.name) for s in part.list_secrets(None)] == [
        (1000, "default"),
        (1000, "hooks"),
        (1001, "default"),
    ]
    with pytest.raises(Conflict):
        part.create_secret(1000, "default", "whsec_again")
    assert part.get_secret(1000, "default").secret == "whsec_a"  # the refused one changed nothing
    with pytest.raises(NotFound):
        part.get_secret(1002, "default")


def test_a_rotated_secret_signs_with_both_until_its_grace_ends(
    store: Store, clock: FakeClock
) -> None:
    part = secrets_of(store)
    part.create_secret(1000, "default", "whsec_old")
    rotated = part.rotate_secret(1000, "default", "whsec_new", 60_000)
    assert rotated.secret == "whsec_new" and rotated.previous == "whsec_old"
    assert rotated.rotated_at is not None and rotated.previous_until == rotated.rotated_at + 60_000
    assert part.signing_secrets(1000, "default") == ["whsec_new", "whsec_old"]
    assert part.signing_secrets(1000, None) == ["whsec_new", "whsec_old"]
    clock.advance(61)
    assert part.signing_secrets(1000, "default") == ["whsec_new"]
    with pytest.raises(NotFound):
        part.rotate_secret(1001, "default", "whsec_x", 1000)


def test_deleting_a_secret_leaves_requests_unsigned_or_refused(store: Store) -> None:
    part = secrets_of(store)
    part.create_secret(1000, "default", "whsec_a")
    part.create_secret(1001, "default", "whsec_b")
    part.delete_secret(1000, "default")
    with pytest.raises(NotFound):
        part.delete_secret(1000, "default")
    assert part.signing_secrets(1000, None) == []  # no default: unsigned
    with pytest.raises(NotFound):
        part.signing_secrets(1000, "default")  # a named one that is gone: refused
    assert part.signing_secrets(1001, None) == ["whsec_b"]  # another owner's is untouched
