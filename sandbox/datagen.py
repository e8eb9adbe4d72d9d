"""Deterministic synthetic data: the same seed always yields the same banks, people and money.

Bulk data is never stored. An account's history is made from its seed one calendar month at a
time with numpy (month `m` of account `a` depends only on the seed, `a` and `m`), so a month
that the sandbox clock reaches later is appended without changing what came before, and a
record of 100,000 transactions takes milliseconds. Amounts are kobo as int64 until the JSON.

Lines settle as a real bank's do (`_settle`): the history's arrays are in posting order, and
the running balance follows that order; a few lines carry a value date (`trans_date`) days
before their posting; a few were pending under another id for two days before they posted;
and a few pending authorisations are reversed after two days, never to post at all.
"""

from __future__ import annotations

import calendar
import hashlib
import random
import tomllib
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import lru_cache
from pathlib import Path

import numpy as np
import orjson

from .clock import iso

# names, places, employers, shops and banks: the vocabulary the data is drawn from
WORDS = tomllib.loads(Path(__file__).with_name("vocabulary.toml").read_text())
FIRST_NAMES, LAST_NAMES, EMPLOYERS, CLIENTS, PLACES, SHOPS, NETWORKS, STATES, LGAS, STREETS = (
    WORDS[k] for k in ("first_names", "last_names", "employers", "clients", "places", "shops",
                       "networks", "states", "lgas", "streets"))
ACCOUNT_TYPES, BANKS = WORDS["account_types"], WORDS["banks"]
LOGIN_TYPES = ["bank", "mobile", "bvn", "account_number"]
PRODUCTS = ["auth", "identity", "accounts", "balance", "transactions", "income", "payment"]

DAY = 86400
LAGOS_S = 3600  # the banks' day is Lagos's: UTC+1, all year
# how a day's lines spread over its UTC hours: banks post around the clock (POS, transfers,
# fees), least at night in Lagos (UTC+1), most from late morning to evening
HOURS = np.array([1.5, 0.8, 0.5, 0.5, 0.8, 2, 4, 6, 7, 8, 8, 8,
                  8, 7, 7, 7, 7, 7, 6, 5, 4, 3, 2, 1.5])
HOURS /= HOURS.sum()


def _hash(parts: tuple, size: int) -> bytes:
    return hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=size).digest()


def object_id(*parts: object) -> str:
    """24 lower-case hex characters, derived from the parts (so reproducible for a seed)."""
    return _hash(parts, 12).hex()


def _int(*parts: object) -> int:
    return int.from_bytes(_hash(parts, 8), "big")


def _digits(rng: random.Random, n: int) -> str:
    return "".join(str(rng.randrange(10)) for _ in range(n))


def bank_objects(seed: int) -> list[dict]:
    out = []
    for b in BANKS:
        bid = object_id(seed, "bank", b["slug"])
        assets = f"https://assets.sandbox.invalid/banks/{b['slug']}"
        out.append({
            "_id": bid, "id": bid, "name": b["name"], "slug": b["slug"], "code": b["code"],
            "colors": {"primary": b["primary"], "accent": "#ffffff", "bg": "#f5f5f5",
                       "button": b["primary"]},
            "logo": f"{assets}/logo.png", "icon": f"{assets}/icon.png",
            "v2_logo": f"{assets}/v2_logo.png", "v2_icon": f"{assets}/v2_icon.png",
            "status": "healthy", "country": "NG", "type": "ind", "products": PRODUCTS,
            # what the connect page offers at this bank (the API's customers/create control
            # ignores these, so tests can still make any record)
            "login_types": b.get("login_types", LOGIN_TYPES),
            "account_types": b.get("account_types", ["personal", "business"]),
            "mfa": b.get("mfa"),  # security_question, token or None: the step after login
        })
    return out


def person(seed: int, customer_id: str) -> dict:
    rng = random.Random(object_id(seed, "person", customer_id))
    first, middle, last = rng.choice(FIRST_NAMES), rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    return {"firstname": first, "middlename": middle, "lastname": last, "name": f"{first} {last}"}


def identity(seed: int, customer_id: str, name: str) -> dict:
    """The identity a bank holds on a customer (BVN, NIN, contacts), fixed by the seed."""
    rng, who = random.Random(object_id(seed, "identity", customer_id)), person(seed, customer_id)
    first, *rest = name.split() or [who["firstname"]]
    last = rest[-1] if rest else who["lastname"]
    birth = date(rng.randint(1960, 2003), rng.randint(1, 12), rng.randint(1, 28))
    phone = "+234" + rng.choice(["803", "806", "813", "703", "802", "808", "905", "816"]) + \
        _digits(rng, 7)
    state_o, state_r = rng.choice(STATES), rng.choice(STATES)
    return {"bvn": "22" + _digits(rng, 9), "nin": _digits(rng, 11),
            "firstname": first, "middlename": who["middlename"], "lastname": last,
            "name": name, "fullname": f"{first} {who['middlename']} {last}",
            "dob": birth.isoformat(), "gender": rng.choice(["Male", "Female"]),
            "marital_status": rng.choice(["Single", "Married", "Married", "Divorced"]),
            "phone": [phone],
            "email": [f"{first}.{last}{rng.randint(1, 99)}@example.com".lower()],
            "address": [f"{rng.randint(1, 120)} {rng.choice(STREETS)}, {rng.choice(LGAS)}, "
                        f"{state_r}"],
            "aliases": [f"{last} {first}".upper()], "photo_id": [],
            "verification_country": "NG", "lga_of_origin": rng.choice(LGAS),
            "lga_of_residence": rng.choice(LGAS), "nationality": "Nigerian",
            "state_of_origin": state_o, "state_of_residence": state_r}


def nuban(seed: int, account_id: str) -> str:
    rng = random.Random(object_id(seed, "nuban", account_id))
    return rng.choice("0123") + _digits(rng, 9)


def account_name_type(seed: int, account_id: str, owner: str,
                      account_type: str = "personal") -> tuple[str, str]:
    rng = random.Random(object_id(seed, "account", account_id))
    kind = rng.choice(ACCOUNT_TYPES.get(account_type, ACCOUNT_TYPES["personal"]))
    return f"{owner.upper()} ENTERPRISES" if account_type == "business" else owner.upper(), kind


def month_index(ts: float) -> int:
    d = datetime.fromtimestamp(ts, tz=UTC)
    return d.year * 12 + d.month - 1


def month_start(m: int) -> int:
    return calendar.timegm((m // 12, m % 12 + 1, 1, 0, 0, 0))


def month_days(m: int) -> int:
    return calendar.monthrange(m // 12, m % 12 + 1)[1]


# -- transactions -----------------------------------------------------------------------------

PERSONAL, BUSINESS = WORDS["personal"], WORDS["business"]  # categories of lines
POOL = 64  # narrations per category, seed and bank
# a narration's placeholder -> how its value is drawn ({bankshort} is the account's bank)
FILL = {"shop": lambda r: r.choice(SHOPS), "place": lambda r: r.choice(PLACES),
        "name": lambda r: f"{r.choice(FIRST_NAMES)} {r.choice(LAST_NAMES)}".upper(),
        "company": lambda r: r.choice(CLIENTS + EMPLOYERS),
        "bank": lambda r: r.choice(BANKS)["slug"].upper(), "net": lambda r: r.choice(NETWORKS),
        "phone": lambda r: f"080{r.randrange(10**8):08d}",
        "num": lambda r: str(r.randint(10_000_000, 99_999_999)),
        "ref": lambda r: f"REF{r.randint(100000, 999999)}"}


@dataclass(frozen=True)
class AccountSpec:
    """Everything an account's history depends on; hashable, so it keys the cache."""
    seed: int
    account_id: str
    bank_short: str
    business: bool
    income: bool       # has an income stream at all
    primary: bool      # the salary goes to the record's first account
    volume: float      # transactions per day, on average
    first_month: int   # month index where the history starts
    created_month: int  # the opening balance is fixed from the months up to this one
    settlement: bool = True  # pending, reversed and back-dated lines (customers/create)
    since: int = 0     # no line posts before this second: a history that starts on a day
    # (sandbox/records/bulk_create; a line pending before it is gone before the record is made)


class _Fill(dict):
    """Placeholder values drawn on first use only: most templates need one or two."""

    def __init__(self, rng: random.Random, bank_short: str) -> None:
        super().__init__(bankshort=bank_short)
        self.rng = rng

    def __missing__(self, key: str) -> str:
        return FILL[key](self.rng)


@lru_cache(maxsize=256)
def _pools(seed: int, bank_short: str, business: bool) -> list[list[str]]:
    """Narrations per category, shared by the accounts of a seed and bank (each account
    draws its own lines from them)."""
    rng = random.Random(object_id(seed, "pools", bank_short, business))
    return [[rng.choice(c["narrations"]).format_map(_Fill(rng, bank_short)) for _ in range(POOL)]
            for c in (BUSINESS if business else PERSONAL)]


@lru_cache(maxsize=4096)
def _profile(spec: AccountSpec) -> dict:
    """Per-account constants: narration pools, income streams, spending level."""
    rng = random.Random(object_id(spec.seed, "profile", spec.account_id))
    streams = []
    if spec.income and spec.primary:
        if spec.business:
            streams.append({"type": "Recurrent Credit", "name": rng.choice(CLIENTS),
                            "source_type": "Business", "day": rng.randint(1, 7),
                            "amount": rng.randint(30, 400) * 10_000 * 100,
                            "desc": "RETAINER FEE {mon} {src}"})
        else:
            streams.append({"type": "Salary", "name": rng.choice(EMPLOYERS),
                            "source_type": "Employer", "day": rng.randint(23, 28),
                            "amount": int(min(5e6, max(6e4, rng.lognormvariate(12.7, 0.6)))
                                          // 1000 * 1000 * 100),
                            "desc": "SALARY {mon} {src}"})
        if rng.random() < 0.35:
            streams.append({"type": "Recurrent Credit",
                            "name": f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}".upper(),
                            "source_type": "Individual", "day": rng.randint(1, 6),
                            "amount": rng.randint(2, 15) * 10_000 * 100,
                            "desc": "MONTHLY ALLOWANCE {mon} FRM {src}"})
    return {"cats": BUSINESS if spec.business else PERSONAL, "streams": streams,
            "pools": _pools(spec.seed, spec.bank_short, spec.business),
            "inflow": sum(s["amount"] for s in streams) or rng.randint(10, 60) * 10_000 * 100,
            "opening_base": rng.randint(5, 200) * 1000 * 100,
            "spend_ratio": rng.uniform(0.82, 0.97)}


def time_of_day(rng: np.random.Generator, n: int) -> np.ndarray:
    """`n` times of day, in seconds since UTC midnight, by the weight of each hour."""
    return rng.choice(24, n, p=HOURS) * 3600 + rng.integers(0, 3600, n)


@lru_cache(maxsize=1024)  # history() and _opening() both walk the first months
def _month(spec: AccountSpec, m: int) -> dict:
    """One calendar month of an account: arrays sorted by time."""
    prof = _profile(spec)
    rng = np.random.default_rng([spec.seed & 0xFFFFFFFF, _int(spec.account_id) & 0xFFFFFFFF, m])
    days, start = month_days(m), month_start(m)
    per_day = rng.poisson(spec.volume, days)
    n = int(per_day.sum())
    day = np.repeat(np.arange(days, dtype=np.int64), per_day)
    ts = start + day * DAY + time_of_day(rng, n)
    cats = prof["cats"]
    weights = np.array([c["weight"] for c in cats], dtype=float)
    cat = rng.choice(len(cats), n, p=weights / weights.sum())
    median = np.array([c["median"] for c in cats], dtype=float)[cat]
    sigma = np.array([c["sigma"] for c in cats], dtype=float)[cat]
    amount = np.maximum(100, np.round(median * np.exp(rng.standard_normal(n) * sigma)) * 100)
    credit = np.array([c["credit"] for c in cats])[cat]
    # scale the free-form flows so that a month spends about what comes in: balances drift
    # gently instead of running away or below zero
    # months differ as real ones do: side income comes and goes, December spends more
    stream_total = sum(s["amount"] for s in prof["streams"])
    in_factor = rng.lognormal(0.0, 0.15)
    out_factor = rng.lognormal(0.0, 0.08) * (1.15 if m % 12 == 11 else 1.0)
    free_in = prof["inflow"] * (0.4 if stream_total else 1.0) * in_factor
    if (total_in := amount[credit].sum()) > 0:
        amount[credit] *= free_in / total_in
    if (total_out := amount[~credit].sum()) > 0:
        amount[~credit] *= (stream_total + free_in) * prof["spend_ratio"] * out_factor / total_out
    amount = np.maximum(100, np.round(amount)).astype(np.int64)
    pool = rng.integers(0, POOL, n)
    stream = np.full(n, -1, dtype=np.int8)
    label = datetime.fromtimestamp(start, tz=UTC).strftime("%b %Y").upper()
    extra_desc = []
    for k, s in enumerate(prof["streams"]):
        ts = np.append(ts, start + (min(s["day"], days) - 1) * DAY + 8 * 3600 + k * 60)
        amount = np.append(amount, s["amount"])
        credit = np.append(credit, True)
        cat = np.append(cat, -1 - k)
        pool = np.append(pool, 0)
        stream = np.append(stream, k)
        extra_desc.append(s["desc"].format(mon=label, src=s["name"]))
    order = np.argsort(ts, kind="stable")
    signed = np.where(credit, amount, -amount)
    return {"ts": ts[order], "signed": signed[order], "cat": cat[order], "pool": pool[order],
            "stream": stream[order], "extra": extra_desc, "month": m}


@lru_cache(maxsize=64)
def _opening(spec: AccountSpec) -> int:
    """Opening balance (kobo): enough that the history up to the connection never dips below."""
    low = running = 0
    for m in range(spec.first_month, spec.created_month + 1):
        mo = _month(spec, m)
        signed = mo["signed"][mo["ts"] >= spec.since]
        if len(signed):
            low = min(low, running + int(np.cumsum(signed).min()))
            running += int(signed.sum())
    return _profile(spec)["opening_base"] - low


# -- settlement: value dates, pending precursors, reversed authorisations -----------------------

PENDING_S = 2 * DAY                  # a pending line waits this long to post, or to be reversed
BACKDATE_S = (4 * DAY, 14 * DAY)     # a back-dated line's value date is this far before posting
BACKDATED, PENDING, REVERSED = 0.005, 0.02, 0.01  # shares of a month's lines
REVERSED_SEQ = 1 << 19               # reversed lines' sequences sit above the month's own lines
NEVER = np.iinfo(np.int64).max


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over uint64s: a cheap, well-spread hash, vectorised."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _pos_category(spec: AccountSpec) -> int:
    """The card-purchase category: what a reversed authorisation looks like."""
    cats = BUSINESS if spec.business else PERSONAL
    return next(i for i, c in enumerate(cats) if c["code"] == "POS" and not c["credit"])


@lru_cache(maxsize=1024)
def _settle(spec: AccountSpec, m: int) -> dict:
    """How month `m`'s lines settle. Kept apart from `_month`, whose random stream (and so
    every line made before this existed) stays as it was.

    `trans`: each line's value date (its posting time, or 4 to 14 days before for a
    back-dated line); `pending`: indices of lines that were pending under another id for
    two days first; `reversed_*`: authorisations of the month that never post. Which lines
    is a hash of (seed, account, sequence); income lines are never chosen."""
    mo = _month(spec, m)
    ts = mo["ts"]
    none = np.zeros(0, np.int64)
    if not spec.settlement or not len(ts):
        return {"trans": ts, "pending": none, "reversed_ts": none, "reversed_signed": none,
                "reversed_pool": none}
    seq = (np.int64(m) << 20) + np.arange(len(ts), dtype=np.int64)
    key = np.uint64(_int(spec.seed, "settle", spec.account_id))
    h = _mix(key ^ _mix(seq.astype(np.uint64)))
    u = (h >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    free = mo["stream"] < 0
    back = free & (u < BACKDATED)
    pending = np.flatnonzero(free & (u >= BACKDATED) & (u < BACKDATED + PENDING))
    trans = ts.copy()
    span = np.uint64(BACKDATE_S[1] - BACKDATE_S[0] + 1)
    trans[back] -= BACKDATE_S[0] + (_mix(h[back]) % span).astype(np.int64)
    rng = np.random.default_rng([spec.seed & 0xFFFFFFFF, _int(spec.account_id) & 0xFFFFFFFF,
                                 m, 0x5E771E])
    k = int(rng.binomial(len(ts), REVERSED))
    rts = np.sort(month_start(m) + rng.integers(0, month_days(m), k) * DAY + time_of_day(rng, k))
    cat = (BUSINESS if spec.business else PERSONAL)[_pos_category(spec)]
    amount = np.maximum(100, np.round(cat["median"] * np.exp(rng.standard_normal(k) * cat["sigma"])) * 100)
    return {"trans": trans, "pending": pending, "reversed_ts": rts,
            "reversed_signed": -amount.astype(np.int64), "reversed_pool": rng.integers(0, POOL, k)}


@dataclass
class Pending:
    """An account's lines that are not posted: each is visible from `start` (its trans_date)
    until `until`, then gone for good (posted under its own id, or reversed). They never
    count in a running balance."""
    start: np.ndarray     # int64 seconds: trans_date, and when the line appears
    until: np.ndarray     # int64 seconds: the line is gone from here on
    signed: np.ndarray    # int64 kobo
    cat: np.ndarray       # category index
    order: np.ndarray     # int64: place among lines of the same trans_date and account
    ref: np.ndarray       # int64: the sequence the line's ref is made of
    ids: list             # 24 hex characters each
    descs: list

    def __len__(self) -> int:
        return len(self.start)

    def visible(self, now: float) -> np.ndarray:
        t = int(now)  # the bounds are whole seconds
        return (self.start <= t) & (self.until > t)


def _pending(spec: AccountSpec, last_month: int, lead: bool) -> Pending:
    """The pending lines of months first_month..last_month and, with `lead`, the precursors of
    the next month's first lines, already pending in the last two days of this one."""
    pools = _profile(spec)["pools"]
    pos = _pos_category(spec)
    chunks, ids, descs = [], [], []  # a month's precursors, then its reversals; ids, narrations
    for m in range(spec.first_month, last_month + 1 + lead):
        mo, st = _month(spec, m), _settle(spec, m)
        p = st["pending"]
        posted_at = mo["ts"][p]
        if m > last_month:
            keep = posted_at - PENDING_S < month_start(m)
            p, posted_at = p[keep], posted_at[keep]
        seq = (np.int64(m) << 20) + p
        cat = mo["cat"][p]
        chunks.append({"start": posted_at - PENDING_S, "until": posted_at,
                       "signed": mo["signed"][p], "cat": cat,
                       "order": seq * 2 + 1,  # after the posted line of the same sequence
                       "ref": seq})
        ids.extend(object_id(spec.seed, "pending", spec.account_id, q) for q in seq.tolist())
        descs.extend(pools[c][q] for c, q in zip(cat.tolist(), mo["pool"][p].tolist(), strict=True))
        if m > last_month:
            continue
        rts = st["reversed_ts"]
        rseq = (np.int64(m) << 20) + REVERSED_SEQ + np.arange(len(rts), dtype=np.int64)
        chunks.append({"start": rts, "until": rts + PENDING_S, "signed": st["reversed_signed"],
                       "cat": np.full(len(rts), pos, dtype=np.int64), "order": rseq * 2,
                       "ref": rseq})
        ids.extend(object_id(spec.seed, "reversed", spec.account_id, m, j) for j in range(len(rts)))
        descs.extend(pools[pos][q] for q in st["reversed_pool"].tolist())
    arrays = {k: np.concatenate([c[k] for c in chunks]).astype(np.int64) if chunks
              else np.zeros(0, np.int64) for k in ("start", "until", "signed", "cat", "order",
                                                   "ref")}
    return Pending(**arrays, ids=ids, descs=descs)


@dataclass
class History:
    """An account's transactions up to the end of a month, as columns."""
    spec: AccountSpec
    ts: np.ndarray        # int64 seconds, ascending
    signed: np.ndarray    # int64 kobo, credit > 0
    balance: np.ndarray   # int64 kobo, running balance after the line
    cat: np.ndarray       # category index; negative: income stream -1 - k
    pool: np.ndarray
    stream: np.ndarray    # income stream index or -1
    seq: np.ndarray       # stable per-account sequence (month << 20 | i)
    descs: list           # narration per line
    opening: int
    trans: np.ndarray     # int64 seconds: value date (trans_date); ts but for back-dated lines
    pending: Pending      # lines not posted (not in ts..descs)
    _rows: list | None = None

    def __len__(self) -> int:
        return len(self.ts)

    def closing(self, upto: int) -> int:
        """The balance (kobo) after the first `upto` posted lines."""
        return int(self.balance[upto - 1]) if upto else self.opening

    def visible(self, now: float) -> int:
        """How many lines have posted by `now` (they are the first ones: ts is ascending)."""
        return int(self.ts.searchsorted(int(now), side="right"))

    def ids(self, upto: int) -> list[str]:
        """The ids of the first `upto` posted lines: the account's prefix, then the sequence,
        so that they sort in posting order."""
        prefix = self.spec.account_id[:12]
        return [f"{prefix}{q:012x}" for q in self.seq[:upto].tolist()]

    def id_of(self, i: int) -> str:
        return f"{self.spec.account_id[:12]}{int(self.seq[i]):012x}"


def lead(last_month: int, now: float) -> bool:
    """Whether `now` is close enough to the next month that its first lines are pending."""
    return now >= month_start(last_month + 1) - PENDING_S


@lru_cache(maxsize=256)
def history(spec: AccountSpec, last_month: int, lead: bool = False) -> History:
    """Lines up to the end of `last_month`; with `lead`, also the next month's precursors
    (generating a month ahead costs as much as a month: only done when they can show)."""
    months = [_month(spec, m) for m in range(spec.first_month, last_month + 1)]

    def joined(arrays: list, dtype=np.int64) -> np.ndarray:
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype)

    ts, signed, cat, pool = (joined([mo[k] for mo in months]) for k in ("ts", "signed", "cat",
                                                                        "pool"))
    stream = joined([mo["stream"] for mo in months], np.int8)
    seq = joined([(np.int64(mo["month"]) << 20) + np.arange(len(mo["ts"])) for mo in months])
    pools = _profile(spec)["pools"]
    descs = [mo["extra"][-1 - c] if c < 0 else pools[c][p] for mo in months
             for c, p in zip(mo["cat"].tolist(), mo["pool"].tolist(), strict=True)]
    trans = (np.concatenate([_settle(spec, mo["month"])["trans"] for mo in months])
             if months else ts)
    cut = int(ts.searchsorted(spec.since))  # the first month's lines before `since` go
    ts, signed, cat, pool, stream, seq, trans, descs = (
        a[cut:] for a in (ts, signed, cat, pool, stream, seq, trans, descs))
    opening = _opening(spec)
    return History(spec, ts, signed, opening + np.cumsum(signed), cat, pool, stream, seq, descs,
                   opening, trans, _pending(spec, last_month, lead))


ROWS_KEPT = 3_000_000  # pre-serialised lines kept in memory (about 1.7 GB at most)
_SERVED: OrderedDict[int, History] = OrderedDict()


def _remember(h: History) -> None:
    """Keep the JSON of the most recently served histories, up to ROWS_KEPT lines."""
    _SERVED[id(h)] = h
    total = sum(len(x._rows or ()) for x in _SERVED.values())
    while total > ROWS_KEPT and len(_SERVED) > 1:
        _, old = _SERVED.popitem(last=False)
        total -= len(old._rows or ())
        old._rows = None


def _stamps(ts: np.ndarray) -> list[str]:
    return np.char.add(np.datetime_as_string(ts.astype("datetime64[s]")), ".000Z").tolist()


def rows(h: History, ctx: dict) -> list[bytes]:
    """Every line as pre-serialised JSON (orjson bytes), built once per history and cached:
    the posted lines in posting order, then the pending ones (`h.pending`'s order).

    `ctx` holds the ids every line carries (account, record, customer, bank, env). Callers
    must not change the list: records with the same spec share it."""
    if h._rows is not None:
        _SERVED.move_to_end(id(h), last=True)
        return h._rows
    prof = _profile(h.spec)
    # a line's category c indexes these; an income line's c = -1 - stream reaches the streams
    topics = [orjson.dumps(c["topics"]).decode() for c in prof["cats"]] + [
        orjson.dumps(["income", "salary" if s["type"] == "Salary" else "recurrent"]).decode()
        for s in reversed(prof["streams"])]
    codes = [c["code"] for c in prof["cats"]] + ["SAL"] * len(prof["streams"])
    branch = f"{h.spec.bank_short} {PLACES[_int(h.spec.account_id) % len(PLACES)]}"
    # one template per account: every value put in below is either ours and JSON-safe
    # (ids, digits, ISO stamps) or passed through orjson (narrations, topics)
    head = (b'{"_id":"%s","id":"%s","account":' + orjson.dumps(ctx["account"])
            + b',"record":' + orjson.dumps(ctx["record"]) + b',"customer":'
            + orjson.dumps(ctx["customer"]) + b',"bank":' + orjson.dumps(ctx["bank"])
            + b',"currency":"NGN","branch":' + orjson.dumps(branch)
            + b',"benefactor":null,"env":' + orjson.dumps(ctx["env"])).decode()
    h0, h1, h2 = head.split("%s")  # the line's id goes in twice; f-strings beat str.format
    cleared = _stamps(h.ts)
    trans = list(cleared)
    back = np.flatnonzero(h.trans != h.ts)  # a few: patch their value dates in
    for i, stamp in zip(back.tolist(), _stamps(h.trans[back]), strict=True):
        trans[i] = stamp
    short, dumps = h.spec.bank_short, orjson.dumps

    def line(lid, tstamp, cleared, amt, balance, c, q, desc, appeared) -> bytes:
        debit, credit = ("null", repr(amt / 100)) if amt > 0 else (repr(-amt / 100), "null")
        return (f'{h0}{lid}{h1}{lid}{h2},"trans_date":"{tstamp}","cleared_date":{cleared},'
                f'"debit":{debit},"credit":{credit},"balance":{balance},"notes":'
                f'{{"desc":{dumps(desc).decode()},"topics":{topics[c]}}},"ref":"{short}'
                f'{q:014d}","code":"{codes[c]}","created_at":"{appeared}","last_updated":'
                f'"{appeared}"}}').encode()

    # a posted line appeared when it posted; a pending one when it was authorised
    p = h.pending
    out = [line(lid, tstamp, f'"{stamp}"', amt, repr(bal / 100), c, q, desc, stamp)
           for lid, tstamp, stamp, amt, bal, c, q, desc in zip(
               h.ids(len(h)), trans, cleared, h.signed.tolist(), h.balance.tolist(),
               h.cat.tolist(), h.seq.tolist(), h.descs, strict=True)]
    out += [line(lid, tstamp, "null", amt, "null", c, q, desc, tstamp)
            for lid, tstamp, amt, c, q, desc in zip(
                p.ids, _stamps(p.start), p.signed.tolist(), p.cat.tolist(), p.ref.tolist(),
                p.descs, strict=True)]
    h._rows = out
    _remember(h)
    return out


def balance_patch(row: bytes, kobo: int, delta: int) -> bytes:
    """`row` (a posted line whose running balance is `kobo`) serving `kobo + delta` instead."""
    old = b',"balance":' + repr(kobo / 100).encode() + b','
    new = b',"balance":' + repr((kobo + delta) / 100).encode() + b','
    assert row.count(old) == 1, "a posted line has one balance member"
    return row.replace(old, new)


def periodic(h: History, upto: int) -> dict:
    """End-of-day balances from the first day of the history to the day of line `upto`, by
    the bank's day: Lagos's (UTC+1), so a line posted at 23:30 UTC ends the next day."""
    if upto == 0:
        return {"available_balance": [], "ledger_balance": []}
    ts = h.ts[:upto]
    first_day = (max(month_start(h.spec.first_month), h.spec.since) + LAGOS_S) // DAY
    days = np.arange(first_day, (int(ts[-1]) + LAGOS_S) // DAY + 1, dtype=np.int64)
    idx = np.searchsorted(ts, (days + 1) * DAY - LAGOS_S, side="left") - 1
    bal = np.where(idx >= 0, h.balance[:upto][np.maximum(idx, 0)], h.opening) / 100
    dates = [date.fromordinal(d + 719163).isoformat() for d in days.tolist()]
    series = [{"amount": a, "date": d} for a, d in zip(bal.tolist(), dates, strict=True)]
    return {"available_balance": series, "ledger_balance": [dict(s) for s in series]}


def _window(monthly: dict[int, int], months: list[int], count: dict[int, int]) -> dict:
    values = [monthly.get(m, 0) for m in months]  # never empty: 3, 6 or 12 months
    return {"average_per_month": round(sum(values) / len(values) / 100, 2),
            "max_per_month": max(values) / 100, "min_per_month": min(values) / 100,
            "occurrence": sum(count.get(m, 0) for m in months), "total": sum(values) / 100}


def income(parts: list[tuple[str, History, int]], now: float) -> dict | None:
    """Income derived from the income-stream credits among the visible transactions.

    `parts` holds (account id, history, visible lines) per account. None when no stream has
    a credit yet (the INCOME product then fails). Every figure is a sum or count over lines
    whose notes.topics hold "income", so it agrees with /transactions/get."""
    streams, monthly, count = [], {}, {}
    first_month = min((h.spec.first_month for _, h, _ in parts), default=None)
    for account_id, h, upto in parts:
        for k, s in enumerate(_profile(h.spec)["streams"]):
            if not (mask := h.stream[:upto] == k).any():
                continue
            ts, amt = h.ts[:upto][mask], h.signed[:upto][mask]
            months = [month_index(t) for t in ts.tolist()]
            for m, a in zip(months, amt.tolist(), strict=True):
                monthly[m] = monthly.get(m, 0) + a
                count[m] = count.get(m, 0) + 1
            streams.append({
                "stream_id": object_id(h.spec.seed, "stream", account_id, k),
                "account": [account_id], "type": s["type"],
                "monthly_amount": round(int(amt.sum()) / len(set(months)) / 100, 2),
                "number_of_transactions": int(mask.sum()),
                "source": {"name": s["name"], "type": s["source_type"]},
                "occurrence": {"first_date": iso(int(ts[0])), "last_date": iso(int(ts[-1])),
                               "total_count": int(mask.sum())}, "primary_stream": False})
    if not streams:
        return None
    max(streams, key=lambda s: s["monthly_amount"])["primary_stream"] = True
    current = month_index(now)
    past = {n: list(range(current - n, current)) for n in (3, 6, 12)}
    complete = list(range(first_month, current)) or [current]
    observed = sum(1 for m in complete if monthly.get(m))
    return {"confidence": round(min(99.0, 40.0 + 60.0 * observed / max(1, len(complete))), 1),
            "number_of_transactions": sum(s["number_of_transactions"] for s in streams),
            "summary": {
                "average_monthly_income": round(sum(monthly.get(m, 0) for m in complete)
                                                / len(complete) / 100, 2),
                "last_year_income": sum(monthly.get(m, 0) for m in past[12]) / 100,
                "account_age_months": current - first_month, "number_of_streams": len(streams),
                "past_three_months": _window(monthly, past[3], count),
                "past_six_months": _window(monthly, past[6], count),
                "past_twelve_months": _window(monthly, past[12], count)},
            "streams": streams}
