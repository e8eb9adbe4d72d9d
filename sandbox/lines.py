"""What /transactions/get serves: a record's (or an account's) lines in the API's order, and
which of them are visible at a moment of the sandbox clock.

A view joins its accounts' histories, posted and pending lines alike, and sorts them once:
by trans_date, then account (by id), then sequence. Posted lines are visible from their
posting time on; a pending one only in its window. The visible positions are worked out
once per clock second and kept, so paging costs a slice, not a pass over the record.
Patches (`sandbox/records/corrupt`) are applied to the served copies of rows, never to the
cached rows, which records with the same spec share.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from itertools import chain

import numpy as np

from .datagen import NEVER, History, balance_patch


@dataclass
class View:
    histories: list[History]  # the parts, in the record's account order
    rows: list[bytes]         # the parts' rows (datagen.rows) one after the other, as built
    tkey: np.ndarray          # trans_date seconds, ascending: the API's order
    start: np.ndarray         # visible from (posting time, or the pending line's start)
    until: np.ndarray         # visible before (NEVER for a posted line)
    index: np.ndarray         # where each line's row is in `rows`
    offsets: list[int]        # where each part's rows begin in `rows`
    _at: tuple | None = None  # (clock second, visible positions, their trans_date)

    @classmethod
    def build(cls, parts: list[tuple[str, History, list[bytes]]]) -> View:
        """`parts`: (account id, history, its rows) in the record's account order. Only
        columns are sorted; rows are reached through `index` when served."""
        rank_of = {a: r for r, a in enumerate(sorted(a for a, _, _ in parts))}
        cols: dict[str, list] = {k: [] for k in ("tkey", "start", "until", "rank", "order")}
        for account_id, h, _ in parts:
            n, p = len(h), h.pending
            cols["tkey"] += [h.trans, p.start]
            cols["start"] += [h.ts, p.start]
            cols["until"] += [np.full(n, NEVER, np.int64), p.until]
            cols["rank"].append(np.full(n + len(p), rank_of[account_id], np.int64))
            cols["order"] += [h.seq * 2, p.order]  # a posted sequence before its precursor
        c = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in cols.items()}
        order = np.lexsort((c["order"], c["rank"], c["tkey"]))
        offsets = np.cumsum([0] + [len(r) for _, _, r in parts]).tolist()
        # one part: its (shared) list as it is; several: one list, joined at C speed
        rows = parts[0][2] if len(parts) == 1 else list(chain.from_iterable(r for _, _, r in parts))
        return cls([h for _, h, _ in parts], rows, c["tkey"][order], c["start"][order],
                   c["until"][order], order, offsets)

    def visible(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        """Positions of the lines visible at `now`, in order, and their trans_date seconds."""
        second = int(now)  # every bound is a whole second
        if self._at is None or self._at[0] != second:
            pos = np.flatnonzero((self.start <= second) & (self.until > second))
            self._at = (second, pos, self.tkey[pos])
        return self._at[1], self._at[2]

    def serve(self, positions: np.ndarray, patches: tuple = ()) -> list[bytes]:
        """The rows at `positions`; `patches` holds (part, posted index, kobo) to add to the
        running balance served for that line."""
        rows, patched = self.rows, {}
        for k, i, delta in patches:  # a handful at most: cheaper to redo than to keep
            at = self.offsets[k] + i
            patched[at] = balance_patch(rows[at], int(self.histories[k].balance[i]), delta)
        return [patched.get(at) or rows[at] for at in self.index[positions].tolist()]


def ledger(account_id: str, h: History, now: float) -> tuple[dict, list[str]]:
    """What a full pull of the account would hold at `now`, in exact integers, and the ids."""
    upto, mask = h.visible(now), h.pending.visible(now)
    posted, pending = h.signed[:upto], h.pending.signed[mask]
    ids = h.ids(upto) + [i for i, v in zip(h.pending.ids, mask.tolist(), strict=True) if v]
    return {"account": account_id, "lines": len(ids), "posted": upto, "pending": int(mask.sum()),
            "credit_kobo": int(posted[posted > 0].sum() + pending[pending > 0].sum()),
            "debit_kobo": int(-posted[posted < 0].sum() - pending[pending < 0].sum()),
            "net_kobo": int(posted.sum() + pending.sum()),
            "pending_credit_kobo": int(pending[pending > 0].sum()),
            "pending_debit_kobo": int(-pending[pending < 0].sum()),
            "opening_balance_kobo": int(h.opening), "ledger_balance_kobo": h.closing(upto),
            "ids_sha256": ids_sha256(ids)}, ids


def ids_sha256(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()
