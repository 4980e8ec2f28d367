"""The protocol's DynamoDB condition and update expressions, one builder per step.

Placeholders are ``#`` plus the attribute's name, so a pool slot's expressions are the plain
lock's with every lease attribute prefixed ``s{i}_`` (``p`` below; see ``items``).
Values (``:name``) are filled in by the store. Every step is one conditional UpdateItem:

- **acquire** may take the lock if ``free``: the item is absent, its lease ended, or the lease
  ran out more than the skew window ago (by the caller's clock; 0.2.0 items, which lack
  ``expires_ms``, by their whole-second ``expiration_time``). It writes a new lease and shifts
  the lease history. A plain lock's fencing token is chosen by the caller (``:token``) and
  written only if it is above the item's ``fence`` and above the lock's *fence record*, an item
  of its own that no TTL and no 0.2.0 client ever deletes, updated in the same transaction
  (``FENCE_ABOVE``): so a take that lands late, after the lock's item was deleted, cannot start
  the counter again below tokens granted meanwhile. Without transactions (dynalite) there is
  no fence record: the take checks the item's ``fence`` alone and sets ``kept_until``, after
  which no write of ours gives the item an ``expiration_time`` that TTL or a 0.2.0 client
  would act on (``ttl``), so the item and its counter stay. A pool slot's token is chosen by
  the caller too, above the slot's ``fence`` and the plain lock's (``SLOT_BELOW``,
  ``PLAIN_BELOW``): a pool's item is never deleted. Every try of one request carries the same
  token, so one that lands late, after its lease was granted, is refused (the counter is at
  its token already, or above).
- **renew** needs the lease to be ours, not ended, and not yet run out by the caller's clock
  (a renew never revives an expired lease), and its clock reading to be no older than the one
  the lease was last granted or renewed with (``renewed_ms``): a renew that lands late, after a
  later one, never moves the lease's end back.
- **release** and **force-release** need the lease to be ours (the named one) and not ended.

The line of fair waiters (see ``items``) adds conditions to an acquire and never changes a
lease: an acquire without a ticket needs the line ``LINE_CLEAR``; a fair waiter's acquire needs
its own place and removes it (with lapsed places it watched, each only if its last poll is still the
one the waiter saw). ``join`` appends a place under the next number (a compare-and-set on
``qn``), ``beat`` records a poll, ``leave`` removes a place; none of them creates an item.

Every write changes ``lease_id`` (awsflock 0.2.0's compare-and-swap value), so a 0.2.0 client's
read-then-put never succeeds across a write of ours.
"""

from __future__ import annotations

from awsflock.protocol import Drops
from awsflock.stores.dynamodb.items import HISTORY, NUMBER, POLLED, history_names
from awsflock.stores.dynamodb.items import PLACE as W
from awsflock.stores.dynamodb.pv import PV_FROM


def ttl(p: str = "", delayed: bool = False) -> str:
    """The SET clause of a lease's ``expiration_time``: ``:ttl``, unless the item is kept for
    good (``kept_until``, an endpoint without transactions). A pool's item has none.
    ``delayed``: plus the lease's lock-delay (``delay_s``), for a write that moves the end of
    a lease which may end unreleased (a renewal, a force): TTL must not delete the item inside
    the delay, nor awsflock 0.2.0 take it then."""
    plus = f" + if_not_exists(#{p}delay_s, :zero)" if delayed else ""
    if p:
        return f"#{p}expiration_time = :ttl{plus}"
    return f"#expiration_time = if_not_exists(#kept_until, :ttl){plus}"


def not_delayed(p: str = "") -> str:
    """A take's condition that the lease it replaces is past its lock-delay: it had none, or
    was released, or its end plus the delay (``free_after_ms``) is before the taker's time
    less the skew window."""
    return (
        f"(attribute_not_exists(#{p}delay_ms) OR #{p}delay_ms = :zero"
        f" OR #{p}ended = :released_mark OR #{p}free_after_ms < :cutoff_ms)"
    )


def free_after(p: str, end: str) -> str:
    """The SET clause of ``free_after_ms`` for a write that sets the lease's end to ``end``
    (a value): that end plus the lease's lock-delay, whoever writes it."""
    return f"#{p}free_after_ms = {end} + if_not_exists(#{p}delay_ms, :zero)"


#: A take on an endpoint without transactions: the item is kept from now on.
KEPT = "#expiration_time = :kept_until, #kept_until = :kept_until"


def owned(p: str = "") -> str:
    """The lease is ``:lease``: our ``lease``, or 0.2.0's ``lease_id`` on an item it wrote last."""
    return f"(#{p}lease = :lease OR (attribute_not_exists(#{p}lease) AND #{p}lease_id = :lease))"


def not_ended(p: str = "") -> str:
    return f"attribute_not_exists(#{p}ended)"


def live(p: str = "") -> str:
    """The lease has not run out at ``:now_ms`` (whole seconds for 0.2.0 items, rounded down)."""
    return (
        f"(#{p}expires_ms > :now_ms OR "
        f"(attribute_not_exists(#{p}expires_ms) AND #{p}expiration_time > :now_s))"
    )


#: A plain lock's lease ran out more than the skew window ago (0.2.0's, by whole seconds).
RAN_OUT = (
    "(#expires_ms < :cutoff_ms"
    " OR (attribute_not_exists(#expires_ms) AND #expiration_time < :cutoff_s))"
)
#: A plain lock is free: no item, its lease ended, or it ran out more than the skew ago.
FREE_PLAIN = f"(attribute_not_exists(#lock_id) OR attribute_exists(#ended) OR {RAN_OUT})"
#: The caller's token is above the lock's counter (on the lock's item).
FENCE_ABOVE = "(attribute_not_exists(#fence) OR #fence < :token)"
#: The same on the fence record, which must be one: an awsflock 0.2.0 client could have locked
#: the record's name (it does not know awsflock's reserved prefix), and would then delete it.
FENCE_RECORD_ABOVE = (
    "(attribute_not_exists(#lock_id) OR (#kind = :fence_kind AND"
    " (attribute_not_exists(#fence) OR #fence < :token)))"
)
#: The fence record's update: it keeps the highest token granted on the lock, forever.
FENCE_UPDATE = "SET #fence = :token, #kind = :fence_kind"
#: A renew's clock reading is no older than the grant's or the last renew's.
NOT_OLDER = "(attribute_not_exists(#{p}renewed_ms) OR #{p}renewed_ms <= :now_ms)"
#: And it moves the end back only if read a whole skew window after that one (``:order_ms`` is
#: its reading less the window): within it, the callers' clocks cannot tell which renew was sent
#: first, and one sent first by a clock ahead must not undo a later, longer renew.
NO_EARLIER = (
    "(#{p}expires_ms <= :expires_ms OR attribute_not_exists(#{p}renewed_ms)"
    " OR #{p}renewed_ms <= :order_ms)"
)


def slot_below(p: str) -> str:
    """Slot ``p``'s counter is below the caller's token."""
    return f"(attribute_not_exists(#{p}fence) OR #{p}fence < :token)"


def free_slot(p: str) -> str:
    """Slot ``p`` of a pool is free: never used, ended, or ran out more than the skew ago."""
    return (
        f"(attribute_not_exists(#{p}lease) OR attribute_exists(#{p}ended)"
        f" OR #{p}expires_ms < :cutoff_ms)"
    )


#: A slot's counter starts above the plain lock's of the same name (its item's ``fence``): a
#: free plain lock made a pool goes on above the tokens it granted.
PLAIN_BELOW = "(attribute_not_exists(#fence) OR #fence < :token)"
#: A plain acquire never takes a pool's item.
PLAIN_NOT_POOL = "attribute_not_exists(#slots)"
#: Nobody holds a group of shares' own lease: only a force-release ends it.
NOT_GROUP = "attribute_not_exists(#shared)"
#: The item is this pool already (the one-request take of a slot), and no shrink in steps is
#: under way (``resizes``).
IS_POOL = "(#slots = :slots AND attribute_not_exists(#resizing_to))"
#: A pool acquire needs the pool's size to agree, or turns a free plain lock into the pool.
POOL_SIZE_AGREES = f"({IS_POOL} OR (attribute_not_exists(#slots) AND {FREE_PLAIN}))"
#: A slot that a pool-resize removed cannot be renewed.
SLOT_IN_POOL = "#slots > :slot"


def never_granted(p: str) -> str:
    """``:lease`` is neither the current lease nor one of the remembered ones: a LEASE_ID is
    granted at most once, so a duplicate of an acquire that lands late (after its lease was
    released, or taken over up to three times) changes nothing."""
    known = [f"#{p}lease"] + [f"#{p}{history_names(i)[0]}" for i in range(HISTORY)]
    return "NOT (" + " OR ".join(f"{name} = :lease" for name in known) + ")"


def acquire_condition(
    p: str, line: str = "", free: str = FREE_PLAIN, pool: str = POOL_SIZE_AGREES, bar: str = ""
) -> str:
    """``line``: the line's part (``LINE_CLEAR``, or ``in_line`` for a fair waiter's take);
    ``free``: for a plain lock, which free state it may take (a pin's, ``fates``; without a
    fence record, ``FREE_PLAIN``). A plain take carries its own token. ``pool``:
    for a slot, what the item must be (``POOL_SIZE_AGREES``: this pool, or a free plain lock
    it turns into one; ``IS_POOL``: this pool already)."""
    if not p:
        condition = f"{free} AND {PLAIN_NOT_POOL} AND {never_granted(p)} AND {FENCE_ABOVE}"
    else:
        condition = (
            f"{free_slot(p)} AND {pool} AND {never_granted(p)} AND {PLAIN_BELOW}"
            f" AND {slot_below(p)} AND {not_delayed(p)}"
        )
        if bar:  # the slot's LEASE_ID is not barred on the pool's item (``items.bar_name``)
            condition += f" AND attribute_not_exists(#{bar})"
    # Past the lock-delay of the lease it replaces (a slot's: and of the plain lock it may make
    # a pool of).
    condition += f" AND {not_delayed()}"
    return f"{condition} AND {line}" if line else condition


def acquire_update(
    p: str,
    holder_sets: list[str],
    holder_removes: list[str],
    line: tuple[str, str] | None = None,
    plain_top: bool = False,
    kept: bool = False,
    given: bool = False,
) -> str:
    """Write a new lease; remember the one it replaces. SET clauses read the item as it was
    before the update (DynamoDB's rule; moto applies them in order, hence oldest first).
    ``plain_top``: a slot's take that turns the item into a pool also sets the plain lock's
    token to ``:plain_top``, the highest it was granted (its fence record's, checked in the same
    transaction), so that every slot made later starts above it (``PLAIN_BELOW``). ``kept``: a
    plain take without transactions, which keeps the item for good (``KEPT``). ``given``: its
    lease before is given (``:pv_*``) even so (``fates.kept``: a group's)."""
    sets = _previous_sets(p, copied=bool(p or kept) and not given)
    for i in range(HISTORY - 1, 0, -1):
        (lease_to, end_to), (lease_from, end_from) = history_names(i), history_names(i - 1)
        sets.append(f"#{p}{lease_to} = if_not_exists(#{p}{lease_from}, :null)")
        sets.append(f"#{p}{end_to} = if_not_exists(#{p}{end_from}, :null)")
    lease0, end0 = history_names(0)
    sets += [
        f"#{p}{lease0} = if_not_exists(#{p}lease, :null)",
        f"#{p}{end0} = if_not_exists(#{p}ended, :null)",
        f"#{p}lease = :lease",
        # A fresh value, never the LEASE_ID: 0.2.0 can then neither renew nor release (delete)
        # a lease of ours, which would let the item be recreated before its end plus the skew.
        f"#{p}lease_id = :version",
        f"#{p}owner = :owner",
        f"#{p}lease_duration = :lease_duration",
        KEPT if kept and not p else ttl(p),
        f"#{p}expires_ms = :expires_ms",
        f"#{p}acquired_ms = :now_ms",
        f"#{p}renewed_ms = :now_ms",
        # The caller's token (checked against the plain lock's fence record, or the slot's and
        # the plain lock's counters on a pool's item, which is never deleted).
        f"#{p}fence = :token",
    ]
    if p and plain_top:
        sets.append("#fence = :plain_top")
    sets += [f"#{p}{name} = :{name}" for name in holder_sets]
    removes = [
        f"#{p}{name}" for name in ("ended", "forced_by", "forced_reason", "forced_ms", "keeper")
    ]
    removes += ["#shared", "#hn", "#claim", "#gl"]  # a group of shares ends with any grant
    removes += [f"#{p}{name}" for name in holder_removes]
    if p:
        sets.append("#slots = :slots")
        # A pool's item must never expire by TTL (every slot's counter lives in it), and must
        # give awsflock 0.2.0 nothing to reclaim, renew or release (a plain lock's `lease` and
        # `ended` stay, so a retried release of that plain lease is still recognised).
        removes += ["#expiration_time", "#lease_id"]
    if line is not None:  # a fair waiter's take also leaves the line (see leave_line)
        sets.append(line[0])
        removes.append(line[1])
    return "SET " + ", ".join(sets) + " REMOVE " + ", ".join(removes)


def _previous_sets(p: str, *, copied: bool) -> list[str]:
    """How the lease before ended (``fates``): ``copied`` from the lease it replaces (on a
    slot, or an item kept for good: never deleted), else given by the caller's pin
    (``:pv_*``)."""
    if copied:
        return [f"#{p}{pv} = if_not_exists(#{p}{src}, :null)" for pv, src in PV_FROM.items()]
    return [f"#{pv} = :{pv}" for pv in PV_FROM]


def renew_condition(p: str) -> str:
    """Also never past the hold's cap (``cap_ms``: ``steps.renew`` sends a renewal refused for
    it again, for the cap)."""
    condition = (
        f"{owned(p)} AND {not_ended(p)} AND {live(p)} AND {NOT_OLDER.format(p=p)}"
        f" AND {NO_EARLIER.format(p=p)}"
        f" AND (attribute_not_exists(#{p}cap_ms) OR #{p}cap_ms >= :expires_ms)"
    )
    return condition + (f" AND {SLOT_IN_POOL}" if p else f" AND {PLAIN_NOT_POOL} AND {NOT_GROUP}")


def renew_update(p: str, keeper: bool = False) -> str:
    """``keeper``: also record who keeps the lease alive (a grant removes it)."""
    return (
        f"SET #{p}lease = :lease, #{p}lease_id = :version, #{p}lease_duration = :lease_duration,"
        f" {ttl(p, delayed=True)}, #{p}expires_ms = :expires_ms, #{p}renewed_ms = :now_ms,"
        f" {free_after(p, ':expires_ms')}" + (f", #{p}keeper = :keeper" if keeper else "")
    )


def release_condition(p: str, group_ok: bool = False) -> str:
    """Also for force-release (``group_ok``: which may end a group of shares). A plain lease's
    writes never touch an item that became a pool (its top-level attributes would then give
    the pool a TTL, or a lease 0.2.0 could take)."""
    condition = f"{owned(p)} AND {not_ended(p)}" + ("" if p else f" AND {PLAIN_NOT_POOL}")
    return condition if p or group_ok else f"{condition} AND {NOT_GROUP}"


def release_update(p: str, kept: bool = False, delayed: bool = False) -> str:
    """``kept``: a plain lock's item is kept for good from now on (``KEPT``), as a take without
    transactions keeps it. A release has no lock-delay. A force of a lease with one
    (``delayed``) leaves the item's TTL as it is (``force_update``)."""
    update = (
        f"SET #{p}ended = :ended, #{p}lease = :lease, #{p}lease_id = :version,"
        f" #{p}expires_ms = :now_ms"
    )
    if kept and not p:
        return f"{update}, {KEPT}"
    return update if delayed else f"{update}, {ttl(p)}"


def force_update(p: str, kept: bool = False, delayed: bool = False) -> str:
    """A force-release. Of a lease with a lock-delay (``delayed``: ``delay_is``), it leaves
    ``free_after_ms`` (the lease's end plus the delay) and the TTL as they are: the force may
    land after the lease ran out, and only its answer bounds when it landed. The store then
    brings them forward to the time of the answer (``delay_from_the_force``)."""
    return (
        release_update(p, kept, delayed)
        + f", #{p}forced_by = :actor, #{p}forced_reason = :reason, #{p}forced_ms = :now_ms"
    )


def delay_is(p: str, delayed: bool) -> str:
    """A force's condition on the lease's lock-delay: none (``delayed`` False), or the one the
    refusal of that variant showed (``:delay_ms``)."""
    if delayed:
        return f"#{p}delay_ms = :delay_ms"
    return f"(attribute_not_exists(#{p}delay_ms) OR #{p}delay_ms = :zero)"


def delay_from_the_force(p: str) -> str:
    """The condition of the write that counts a forced lease's lock-delay from the force's
    answer (``:answered_free_after_ms``): the lease is still the one this force ended (``:lease``,
    ``:ended``), and its delay would end later than that."""
    return (
        f"#{p}lease = :lease AND #{p}ended = :ended AND #{p}free_after_ms > :answered_free_after_ms"
    )


def delay_from_the_force_update(p: str) -> str:
    return f"SET #{p}free_after_ms = :answered_free_after_ms, {ttl(p, delayed=True)}"


#: An acquire that takes no place in line: nobody waits in line, or nobody polled lately.
LINE_CLEAR = "(attribute_not_exists(#qlen) OR #qlen = :zero OR #qpoll < :qcut)"


def unchanged(drop: Drops) -> str:
    """Each lapsed place in ``drop`` still shows the poll it was seen with."""
    return " AND ".join(f"#{POLLED}{t} = :{POLLED}{t}" for t, _ in drop)


def in_line(ticket: str, drop: Drops, number: int | None = None) -> str:
    """A fair waiter's place exists (with ``number``, if given: ``:qplace``; not dropped and
    joined again since), and the lapsed places it removes have not changed."""
    same = [] if number is None else [f"#{NUMBER}{ticket} = :qplace"]
    exists = f"attribute_exists(#{W}{ticket})"
    return " AND ".join([exists, *same, *([unchanged(drop)] if drop else [])])


def leave_line(tickets: list[str]) -> tuple[str, str]:
    """The SET and REMOVE clauses that take ``tickets``' places out of the line."""
    removes = [f"#{prefix}{t}" for t in tickets for prefix in (W, NUMBER, POLLED)]
    return "#qlen = if_not_exists(#qlen, :zero) - :gone", ", ".join(removes)


def join_condition(ticket: str, raise_polled: bool) -> str:
    """The record exists (a place never creates one) and the ticket has no place yet."""
    condition = f"attribute_exists(#lock_id) AND attribute_not_exists(#{W}{ticket})"
    return condition + (f" AND {RAISES_POLLED}" if raise_polled else "")


def join_update(ticket: str, raise_polled: bool) -> str:
    """The place gets the next number and the counter goes up, in one write (SET clauses read
    the item as it was before it: DynamoDB's rule; moto applies them in order, hence the
    number before the counter)."""
    return (
        f"SET #{W}{ticket} = :entry, #{NUMBER}{ticket} = if_not_exists(#qn, :zero),"
        f" #{POLLED}{ticket} = :now_ms, #qn = if_not_exists(#qn, :zero) + :one,"
        " #qlen = if_not_exists(#qlen, :zero) + :one"
        + (", #qpoll = :now_ms" if raise_polled else "")
    )


#: The line's latest poll is only ever raised (DynamoDB has no max(): a join or beat that would
#: lower it is sent again without it).
RAISES_POLLED = "(attribute_not_exists(#qpoll) OR #qpoll < :now_ms)"


def beat_condition(ticket: str, drop: Drops, raise_polled: bool) -> str:
    """The place exists with an earlier poll (a beat that lands late changes nothing, so it
    cannot make the line look unpolled), and the dropped places are unchanged."""
    condition = in_line(ticket, drop) + f" AND #{POLLED}{ticket} < :now_ms"
    return condition + (f" AND {RAISES_POLLED}" if raise_polled else "")


def beat_update(ticket: str, drop: Drops, raise_polled: bool) -> str:
    update = f"SET #{POLLED}{ticket} = :now_ms" + (", #qpoll = :now_ms" if raise_polled else "")
    if not drop:
        return update
    sets, removes = leave_line([t for t, _ in drop])
    return f"{update}, {sets} REMOVE {removes}"
