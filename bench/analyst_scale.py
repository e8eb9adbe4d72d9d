"""Analysts at a million records: each warehouse view against the same question by hand.

Per level (10k, 100k and 1M records by default) it makes a lake of thin records with the
project's own schemas (resources/tables.py) and writer (resources/lake.py, resources/delta.py):
2 accounts a record, ~3 lines an account a day (Poisson) over 90 days, running balances exact
(integer kobo summed, then decimal), the service's end-of-day `balance_periodic`, two balance
snapshots an account, `income` and `income_streams`, `landings`, `checks` and `records`; a
customer in five has two records. Columns are made with numpy and Arrow, 2,000 records at a
time, never a row at a time. Record ids are random 24-hex strings, as the service's.

Two layouts of the same lake are measured:

- **compacted**: one commit per 50,000 records (transactions streamed through
  `Lake.replace_stream`, the other tables through `Lake.append_rows` / `Lake.write`; a
  generation stopped part-way goes on, with `--resume`, from the commits each table holds), then
  the nightly maintenance's compaction as it calls it (`delta.compact`: clustered by
  `record_id` while a table is within LEDGERLAKE_LAKE_CLUSTER_MAX_MB, else its small files
  packed; files up to LEDGERLAKE_LAKE_TARGET_MB, as the maintenance reads it), then a vacuum
  of the superseded files;
- **hourly**: then a day of hourly runs, 24 more commits over it, each run's batch of 50
  random records (a transactions chunk) written back the way the pipeline writes them:
  `Lake.replace` of their rows (transactions: a window of the last 3 days, as the daily
  refresh pulls), `Lake.append` of new balance snapshots, `append_rows` of landings and checks,
  the `records` table rewritten whole; a vacuum after each run (disk, not the pipeline's week).

On each it builds the warehouse with the project's code (`assets.warehouse.build`, whatever the
views are today) and asks each question through the views (`select ... from view`, opened as
`ledgerlake sql` opens it: `pipeline.cli.sql.open_warehouse`) and by hand (plain DuckDB SQL
over `read_parquet` of the table's snapshot files, with the filter where a good analyst puts
it), each run in a fresh child process: wall, CPU (user + system) and peak RSS (VmHWM, the
whole process's: ~100 MB of it is Python, DuckDB and Arrow loaded), median of `--runs`. The
answers of both are compared (the columns both have; rows as multisets, exactly). A child
over `--max-rss-mb` or `--timeout` is stopped and noted (the machine is shared).

    .venv/bin/python bench/analyst_scale.py --records 10000,100000 --code HEAD   # ~1.5 h
    .venv/bin/python bench/analyst_scale.py --code HEAD    # + 1M records: hours, ~40 GB
    .venv/bin/python bench/analyst_scale.py --quick --out /tmp/a.json   # 2,000 records, smoke
    # a level in sittings: stop it any time (its step, question or hourly run so far is kept),
    # go on from there, then publish the levels' partial files together
    .venv/bin/python bench/analyst_scale.py --records 1000000 --code REV --keep --work W
    # (--make-only: make and compact the lake, then stop; making it need not be quiet)
    .venv/bin/python bench/analyst_scale.py --resume W/analyst-1000000-* --code REV
    .venv/bin/python bench/analyst_scale.py --publish W/analyst_scale.partial.json ...

Writes bench/results/analyst_scale.json (every figure, the lake's layout per table, EXPLAIN
ANALYZE of some views) and its table in bench/README.md (`--out`: elsewhere, README left
alone); a `--resume` without `--out` writes its level to the partial file only. The lake is
made under `--work` (default a temporary folder in /tmp: ~4 GB at 100k records, ~40 GB at
1M), removed at the end unless `--keep`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness
from harness import ROOT

TZ = "Africa/Lagos"  # the warehouse's default zone: UTC+1 all year
LAGOS = dt.timezone(dt.timedelta(hours=1))
END = dt.date(2026, 11, 26)  # the lake's last day (the customers'); 90 days end there
DAYS = 90
START = END - dt.timedelta(days=DAYS - 1)
LAST30 = END - dt.timedelta(days=29)
MONTH = dt.date(2026, 10, 1)  # q3's month: whole inside the 90 days
WINDOW = dt.timedelta(days=3)  # the daily refresh's overlap (assets.transactions.OVERLAP)
LINES_A_DAY, ACCOUNTS = 3, 2
PIECE = 2000  # records generated at a time
HOURLY_BATCH = 50  # a transactions chunk (assets.transactions.CHUNK)
TARGETS = {"lookup_s": 1.0, "lookup_ratio": 2.0, "lookup_mb": 500,
           "whole_ratio": 1.5, "whole_mem_ratio": 2.0, "whole_mb": 4096}
WHOLE = ("q3", "q4", "q5", "q7")  # questions over the whole lake: the other targets


# == the lake ===================================================================================

def hex_chars(raw):
    """(n, k) bytes -> (n, 2k) lower-case hex characters, as uint8."""
    import numpy as np

    table = np.frombuffer(b"0123456789abcdef", np.uint8)
    out = np.empty((raw.shape[0], raw.shape[1] * 2), np.uint8)
    out[:, 0::2], out[:, 1::2] = table[raw >> 4], table[raw & 15]
    return out


def digit_chars(values, width: int):
    """Non-negative integers -> (n, width) decimal digits, zero-padded, as uint8."""
    import numpy as np

    values = values.astype(np.uint64)
    powers = (10 ** np.arange(width - 1, -1, -1, dtype=np.uint64))
    return ((values[:, None] // powers) % 10 + 48).astype(np.uint8)


def hex_digits(values, width: int):
    import numpy as np

    table = np.frombuffer(b"0123456789abcdef", np.uint8)
    shifts = np.arange(width - 1, -1, -1, dtype=np.uint64) * 4
    return table[(values.astype(np.uint64)[:, None] >> shifts) & 15]


def strings(chars):
    """(n, w) uint8 characters -> an Arrow string array of n strings of w characters."""
    import numpy as np
    import pyarrow as pa

    n, w = chars.shape
    offsets = np.arange(0, (n + 1) * w, w, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets),
                                       pa.py_buffer(np.ascontiguousarray(chars)))


def money(kobo, valid=None):
    """Integer kobo -> decimal(18,2) naira, exactly (the decimal's unscaled value is the kobo)."""
    import numpy as np
    import pyarrow as pa

    words = np.empty((len(kobo), 2), np.int64)
    words[:, 0], words[:, 1] = kobo, kobo >> 63
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.decimal128(18, 2), len(kobo),
                                 [bitmap, pa.py_buffer(words)])


def stamps(ms, valid=None):
    import pyarrow as pa

    return pa.array(ms, pa.timestamp("ms", tz="UTC"), mask=None if valid is None else ~valid)


def const(value, n: int, type_=None):
    import numpy as np
    import pyarrow as pa

    return pa.array([value], type_).take(np.zeros(n, np.int32))


def midnight_ms(day: dt.date) -> int:
    """The customers' midnight starting `day`, in UTC milliseconds."""
    return int(dt.datetime.combine(day, dt.time(), LAGOS).timestamp() * 1000)


# debit and credit kinds: narrations, topics, code, share of lines
KINDS = [  # (credit, code, topics, weight, narrations)
    (False, "POS", ["pos", "shopping"], 0.32, ["POS PURCHASE {} LAGOS NG", "POS WEB {} NG"]),
    (False, "TRF", ["transfer"], 0.18, ["TRF TO {} ***{}", "NIP TRANSFER TO {}"]),
    (False, "AIR", ["airtime"], 0.10, ["AIRTIME MTN 080***{}", "AIRTIME AIRTEL 081***{}"]),
    (False, "ATM", ["cash"], 0.06, ["ATM WDL {} BRANCH"]),
    (False, "CHG", ["fees"], 0.04, ["SMS ALERT CHARGES", "STAMP DUTY {}"]),
    (True, "TRF", ["transfer"], 0.22, ["TRF FROM {} ***{}", "NIP FRM {}"]),
    (True, "SAL", ["income", "salary"], 0.05, ["SALARY {} NOV", "PAYROLL {}"]),
    (True, "RVS", ["refund"], 0.03, ["REVERSAL {}"]),
]
NAMES = ["ADEBAYO OKAFOR", "CHIOMA BELLO", "IBRAHIM MUSA", "NGOZI EZE", "TUNDE BAKARE",
         "AISHA YUSUF", "EMEKA OBI", "FOLAKE ADEYEMI", "SANI ABUBAKAR", "KEMI OLADIPO"]
PLACES = ["IKEJA", "YABA", "LEKKI", "ABUJA", "IBADAN", "KANO", "ENUGU", "PORT HARCOURT"]


class Maker:
    """The rows of a level's records, any slice of them, from one seed (vectorised)."""

    def __init__(self, records: int, seed: int, lake):
        import numpy as np
        import pyarrow as pa

        self.n, self.seed, self.lake = records, seed, lake
        rng = np.random.default_rng(seed)
        ids = rng.integers(0, 256, (records, 12), np.uint8)
        self.record_ids = strings(hex_chars(ids)).to_pylist()
        if len(set(self.record_ids)) != records:
            raise RuntimeError("two records drew the same id: try another --seed")
        customer = np.arange(records)
        customer[1::5] = customer[0::5][:len(customer[1::5])]  # a customer in five: 2 records
        self.customer = customer
        self.customer_hex = hex_chars(rng.integers(0, 256, (records, 12), np.uint8))
        self.banks = hex_chars(rng.integers(0, 256, (20, 12), np.uint8))
        # each kind's narrations, with their blanks filled once: a pool to pick from
        pool, self.kind_first, self.kind_size = [], [], []
        for k, (_, _, _, _, texts) in enumerate(KINDS):
            self.kind_first.append(len(pool))
            for i in range(24):
                text = texts[i % len(texts)]
                pool.append(text.format(*(NAMES[(i + k) % len(NAMES)].split()[0],
                                          f"{(i * 7919 + k) % 10000:04d}")[:text.count("{}")]))
            self.kind_size.append(24)
        self.narrations = pa.array(pool, pa.string())
        self.topics = pa.array([t for _, _, t, _, _ in KINDS], pa.list_(pa.string()))
        self.codes = pa.array([c for _, c, _, _, _ in KINDS], pa.string())
        weights = np.array([w for _, _, _, w, _ in KINDS])
        self.weights = weights / weights.sum()
        self.credit_kind = np.array([c for c, _, _, _, _ in KINDS])
        self.branches = pa.array([f"BANK{b:02d} {p}" for b in range(20) for p in PLACES])
        self.names = pa.array(NAMES, pa.string())

    def piece(self, index, part: int) -> dict:
        """Every table's rows of the records `index` (their numbers, any order): Arrow tables
        in each table's declared schema, with `record_id` (transactions: with its rows'
        count per record, in the order of `index`, and no record_id)."""
        import numpy as np
        import pyarrow as pa

        from resources.tables import schema

        rng = np.random.default_rng([self.seed, part, 7])
        index = np.asarray(index)
        r = len(index)
        rec = pa.array([self.record_ids[i] for i in index], pa.string())
        cust = self.customer_hex[self.customer[index]]
        bank = self.banks[index % 20]
        a = r * ACCOUNTS
        acct_rec = np.repeat(np.arange(r), ACCOUNTS)
        acct_hex = hex_chars(rng.integers(0, 256, (a, 12), np.uint8))
        accounts_ids = strings(acct_hex)
        opening = rng.integers(0, 50_000_000, a)  # kobo
        day0 = midnight_ms(START)

        # -- transactions: ~3 a day an account, posted in order, the last evening pending
        counts = rng.poisson(LINES_A_DAY, (a, DAYS))
        per_acct = counts.sum(1)
        n = int(per_acct.sum())
        line_acct = np.repeat(np.arange(a), per_acct)
        line_day = np.repeat(np.tile(np.arange(DAYS), a), counts.ravel())
        group = line_acct * DAYS + line_day
        ms_in_day = rng.integers(0, 86_400_000, n)
        ms_in_day = ms_in_day[np.lexsort((ms_in_day, group))]
        when = day0 + line_day * 86_400_000 + ms_in_day
        pending = (line_day == DAYS - 1) & (ms_in_day >= 20 * 3_600_000)
        posted = ~pending
        kind = rng.choice(len(KINDS), n, p=self.weights)
        credit = self.credit_kind[kind]
        size = np.where(credit, rng.lognormal(12.5, 1.3, n), rng.lognormal(11.5, 1.2, n))
        kobo = np.maximum(size.astype(np.int64), 1)
        signed = np.where(credit, kobo, -kobo)
        first_line = np.concatenate([[0], np.cumsum(per_acct)[:-1]])
        running = np.cumsum(np.where(posted, signed, 0))
        before = np.where(first_line > 0, running[first_line - 1], 0)
        running = running - before[line_acct] + opening[line_acct]
        seq = np.arange(n) - first_line[line_acct]
        tx_id = np.concatenate([acct_hex[line_acct][:, :12], hex_digits(seq, 12)], axis=1)
        narr = (np.array(self.kind_first)[kind] + rng.integers(0, 24, n)).astype(np.int32)
        bank_of_line = (index % 20)[acct_rec][line_acct]
        branch = (bank_of_line * len(PLACES) + rng.integers(0, len(PLACES), n)).astype(np.int32)
        ref = np.concatenate([np.full((n, 2), ord("F"), np.uint8),
                              digit_chars(rng.integers(0, 10**14, n), 14)], axis=1)
        ref[:, 1] = ord("T")
        tx = pa.table({
            "transaction_id": strings(tx_id),
            "account_id": accounts_ids.take(line_acct),
            "customer_id": strings(cust[acct_rec][line_acct]),
            "bank_id": strings(bank[acct_rec][line_acct]),
            "trans_date": stamps(when),
            "cleared_date": stamps(when, posted),
            "debit": money(kobo, ~credit),
            "credit": money(kobo, credit),
            "amount": money(signed),
            "balance": money(running, posted),
            "currency": const("NGN", n),
            "narration": self.narrations.take(narr),
            "topics": self.topics.take(kind.astype(np.int32)),
            "ref": strings(ref),
            "branch": self.branches.take(branch),
            "code": self.codes.take(kind.astype(np.int32)),
            "env": const("production", n),
            "created_at": stamps(when + 1000),
            "last_updated": stamps(when + 1000),
            "narration_sealed": pa.nulls(n, pa.binary()),
        }, schema=schema("transactions"))
        per_record = np.bincount(acct_rec[line_acct], minlength=r)

        # -- the end of each day: the last posted line's balance, carried over days without
        eod = np.full(a * DAYS, -1, np.int64)
        pg = group[posted]
        last = np.flatnonzero(np.r_[pg[1:] != pg[:-1], True])
        eod[pg[last]] = np.flatnonzero(posted)[last]
        eod = eod.reshape(a, DAYS)
        eod = np.maximum.accumulate(eod, axis=1)
        ledger = np.where(eod >= 0, running[np.maximum(eod, 0)], opening[:, None])
        hold = np.where(np.arange(DAYS) == DAYS - 1, 1, 0)[None, :] * \
            rng.integers(0, 200_000, (a, 1))
        days = np.arange(DAYS, dtype=np.int32) + (START - dt.date(1970, 1, 1)).days
        periodic = pa.table({
            "account_id": accounts_ids.take(np.repeat(np.arange(a), DAYS)),
            "date": pa.array(np.tile(days, a), pa.date32()),
            "available_balance": money((ledger - hold).ravel()),
            "ledger_balance": money(ledger.ravel()),
            "record_id": rec.take(np.repeat(acct_rec, DAYS)),
        })
        # two snapshots an account: yesterday's evening and today's
        fetched = np.array([midnight_ms(END) - 5 * 3_600_000, midnight_ms(END) + 19 * 3_600_000])
        snap_acct = np.repeat(np.arange(a), 2)
        snap_day = np.tile([DAYS - 2, DAYS - 1], a)
        snap_ledger = ledger[snap_acct, snap_day]
        history = pa.table({
            "account_id": accounts_ids.take(snap_acct),
            "fetched_at": stamps(np.tile(fetched, a)),
            "available_balance": money(snap_ledger - hold[snap_acct, snap_day]),
            "ledger_balance": money(snap_ledger),
            "currency": const("NGN", 2 * a),
            "source": pa.array(np.tile(["schedule", "callback"], a)),
            "service_updated_at": stamps(np.tile(fetched, a) - 60_000),
            "record_id": rec.take(acct_rec[snap_acct]),
        })
        made = midnight_ms(START) - rng.integers(1, 900, a) * 86_400_000
        name = self.names.take((self.customer[index] % len(NAMES))[acct_rec])
        accounts = pa.table({
            "account_id": accounts_ids,
            "nuban": strings(digit_chars(rng.integers(0, 10**10, a), 10)),
            "name": name,
            "type": pa.array(np.tile(["Savings", "Current"], r)),
            "currency": const("NGN", a),
            "bank_id": strings(bank[acct_rec]),
            "customer_id": strings(cust[acct_rec]),
            "customer_name": name,
            "balance_id": strings(hex_chars(rng.integers(0, 256, (a, 12), np.uint8))),
            "env": const("production", a),
            "created_at": stamps(made),
            "last_updated": stamps(fetched[1] + np.zeros(a, np.int64)),
            "record_id": rec.take(acct_rec),
        })

        # -- income: the service's estimate of each record's customer, and one stream
        monthly = (rng.lognormal(12.5, 0.9, r) * 100).astype(np.int64) // 100 * 100
        salaries = rng.integers(1, 12, r)
        estimated = midnight_ms(END) + 20 * 3_600_000 + np.zeros(r, np.int64)
        income = pa.table({
            "income_id": strings(hex_chars(rng.integers(0, 256, (r, 12), np.uint8))),
            "customer_id": strings(cust),
            "confidence": pa.array(np.round(rng.uniform(40, 99, r), 1)),
            "number_of_transactions": pa.array(salaries),
            "average_monthly_income": money(monthly),
            "last_year_income": money(monthly * 12),
            "account_age_months": pa.array(rng.integers(3, 120, r)),
            "number_of_streams": pa.array(np.ones(r, np.int64)),
            "past_three_months_total": money(monthly * 3),
            "past_six_months_total": money(monthly * 6),
            "past_twelve_months_total": money(monthly * 12),
            "past_twelve_months_average": money(monthly),
            "created_at": stamps(estimated),
            "record_id": rec,
        })
        streams = pa.table({
            "stream_id": strings(hex_chars(rng.integers(0, 256, (r, 12), np.uint8))),
            "account_ids": pa.ListArray.from_arrays(
                pa.array(np.arange(r + 1, dtype=np.int32) * ACCOUNTS), accounts_ids),
            "type": const("Salary", r),
            "monthly_amount": money(monthly),
            "number_of_transactions": pa.array(salaries),
            "source_name": self.names.take((index % len(NAMES)).astype(np.int32)),
            "source_type": const("employer", r),
            "first_date": pa.array(np.full(r, days[0]), pa.date32()),
            "last_date": pa.array(np.full(r, days[-1]), pa.date32()),
            "total_count": pa.array(salaries),
            "primary_stream": const(True, r),
            "record_id": rec,
        })
        return {"transactions": tx, "transactions_per_record": per_record,
                "balance_periodic": periodic, "balance_history": history,
                "accounts": accounts, "income": income, "income_streams": streams,
                "landings": self.landings(rec, part, per_record), "checks": self.checks(rec, part)}

    def landings(self, rec, part: int, rows, run: str | None = None):
        import numpy as np
        import pyarrow as pa

        products = ["accounts", "balances", "transactions", "income"]
        tables = ["accounts", "balance_history", "transactions", "income"]
        r, k = len(rec), len(products)
        at = midnight_ms(END) + 19 * 3_600_000 + part * 1000
        counts = np.stack([np.full(r, ACCOUNTS), np.full(r, 2 * ACCOUNTS), rows,
                           np.ones(r, np.int64)], axis=1).ravel()
        return pa.table({
            "product": pa.array(np.tile(products, r)),
            "run_id": const(run or f"{part:08x}-bulk-0000-0000-000000000000", r * k),
            "landed_at": stamps(np.full(r * k, at)),
            "outcome": const("landed", r * k),
            "row_count": pa.array(counts),
            "fetched_rows": pa.array(counts),
            "pull": const("full history", r * k),
            "lake_table": pa.array(np.tile([self.lake.shown(t) for t in tables], r)),
            "lake_version": const(part, r * k, pa.int64()),
            "error": pa.nulls(r * k, pa.string()),
            "record_id": rec.take(np.repeat(np.arange(r), k)),
        })

    def checks(self, rec, part: int, run: str | None = None):
        import numpy as np
        import pyarrow as pa

        r = len(rec)
        at = midnight_ms(END) + 19 * 3_600_000 + part * 1000
        return pa.table({
            "product": pa.array(np.tile(["transactions", "income"], r)),
            "check_name": pa.array(np.tile(["running_balance", "income_matches"], r)),
            "run_id": const(run or f"{part:08x}-bulk-0000-0000-000000000000", 2 * r),
            "evaluated_at": stamps(np.full(2 * r, at)),
            "passed": const(True, 2 * r),
            "blocking": pa.array(np.tile([True, False], r)),
            "problem_count": const(0, 2 * r, pa.int64()),
            "problems": pa.nulls(2 * r, pa.string()),
            "record_id": rec.take(np.repeat(np.arange(r), 2)),
        })

    def records(self, numbers, updated: dict[str, int] | None = None):
        """The `records` table (record_status's columns) of these records."""
        import numpy as np
        import pyarrow as pa

        from resources.tables import schema

        numbers = np.asarray(numbers)
        r = len(numbers)
        at = midnight_ms(END) + 19 * 3_600_000
        when = np.full(r, at, np.int64)
        if updated:
            ids = [self.record_ids[i] for i in numbers]
            when = np.array([updated.get(x, at) for x in ids], np.int64)
        cols = {"record_id": pa.array([self.record_ids[i] for i in numbers], pa.string()),
                "status": const("connected", r), "status_at": stamps(np.full(r, at - 86_400_000)),
                "last_method": const("TRANSACTIONS", r),
                "last_code": const("TRANSACTIONS_SUCCESS", r), "last_callback_at": stamps(when)}
        for p in ("auth", "identity", "accounts", "balance", "transactions", "income",
                  "payment"):
            known = p not in ("identity", "payment")
            cols[f"{p}_code"] = const(f"{p.upper()}_SUCCESS" if known else None, r, pa.string())
            cols[f"{p}_at"] = stamps(when, np.full(r, known))
        return pa.table(cols, schema=schema("records"))


GENERATED = ("transactions", "balance_periodic", "balance_history", "accounts", "income",
             "income_streams", "landings", "checks")  # a commit each per chunk of records


def generate(maker: Maker, lake, per_commit: int, say) -> dict:
    """The first landing of every record: one commit per table per `per_commit` records
    (records in random order, as they arrive), transactions streamed piece by piece through
    the pipeline's streamed replace. One stopped part-way goes on where it stopped: each
    table's WRITEs in its Delta log count the chunks it holds (a million records take hours)."""
    import numpy as np
    import pyarrow as pa

    from resources.tables import schema

    order = np.random.default_rng([maker.seed, 1]).permutation(maker.n)
    held = {t: _writes(lake, t) for t in GENERATED}
    took = {"commits": 0, "seconds": {}, "resumed_at_chunk": min(held.values())}
    t_all, part = time.perf_counter(), 0
    for chunk, start in enumerate(range(0, maker.n, per_commit)):
        chosen = order[start:start + per_commit]
        chosen = chosen[np.argsort([maker.record_ids[i] for i in chosen])]  # by id, as written
        pieces = [(part + k, chosen[i:i + PIECE])
                  for k, i in enumerate(range(0, len(chosen), PIECE))]
        part += len(pieces)
        todo = [t for t in GENERATED if held[t] <= chunk]
        if not todo:
            continue
        made = {}  # each piece's rows of the other tables, from the last pass over them

        def rows(pieces=pieces, made=made):
            for k, (number, index) in enumerate(pieces):
                piece = maker.piece(index, number)
                made[k] = others(piece)  # a chunk's transactions held at once: ~9 GB
                ids = pa.array([maker.record_ids[i] for i in index], pa.string())
                yield from piece["transactions"].append_column("record_id", ids.take(
                    np.repeat(np.arange(len(index)), piece["transactions_per_record"]))
                ).to_batches()

        ids = [maker.record_ids[i] for i in chosen]
        if "transactions" in todo:
            _timed(took, "transactions", lambda ids=ids, rows=rows: lake.replace_stream(
                "transactions", ids, rows, schema("transactions")))
        else:
            made.update({k: others(maker.piece(index, number))
                         for k, (number, index) in enumerate(pieces)})
        for table in (t for t in todo if t != "transactions"):
            _timed(took, table, lambda t=table, made=made: lake.append_rows(
                t, pa.concat_tables([made[k][t] for k in sorted(made)]), schema(t)))
        took["commits"] += 1
        say(f"  commit {chunk + 1}: {start + len(chosen):,} records, "
            f"{time.perf_counter() - t_all:.0f} s")
    _timed(took, "records", lambda: lake.write("records", None, maker.records(
        np.arange(maker.n)), schema=schema("records")))
    took["seconds"] = {k: round(v, 1) for k, v in took["seconds"].items()}
    took["total_s"] = round(time.perf_counter() - t_all, 1)
    took["peak_rss_mb_so_far"] = round(vm("VmHWM"), 1)  # a chunk is never held whole
    return took


def others(piece: dict) -> dict:
    """A piece's tables but its transactions (streamed, never kept)."""
    return {t: rows for t, rows in piece.items()
            if t not in ("transactions", "transactions_per_record")}


def _writes(lake, table: str) -> int:
    """How many data commits `table` holds (0: none, or no table yet)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        history = DeltaTable(lake.table_uri(table)).history()
    except TableNotFoundError:
        return 0
    return sum(h["operation"] == "WRITE" for h in history)


def _timed(took: dict, table: str, write) -> None:
    """`write()` on a big stack (a replace's predicate names every record), its seconds
    added to the table's."""
    t0 = time.perf_counter()
    on_big_stack(write)
    took["seconds"][table] = took["seconds"].get(table, 0) + time.perf_counter() - t0


def on_big_stack(fn):
    """fn() in a thread with a 1 GiB stack: delta-rs plans a replace of 50,000 records
    (its predicate names each) deeper than the main thread's 8 MiB, and dies of it (SIGSEGV)."""
    import threading

    got: dict = {}

    def run():
        try:
            got["value"] = fn()
        except BaseException as exc:  # raised in the caller's thread
            got["error"] = exc

    before = threading.stack_size(1 << 30)
    try:
        worker = threading.Thread(target=run, name="big-commit")
        worker.start()
    finally:
        threading.stack_size(before)
    worker.join()
    if "error" in got:
        raise got["error"]
    return got["value"]


def compact(lake, say) -> dict:
    """The nightly maintenance's compaction of every table, called as it calls it
    (`delta.compact`: re-sorted by record where the table is kept by record and within
    LEDGERLAKE_LAKE_CLUSTER_MAX_MB, else its small files packed; the maintenance's target
    size; the sort held to `delta.SORT_MEMORY`), then the superseded files vacuumed."""
    from assets.maintenance import MB
    from assets.warehouse import UNPARTITIONED
    from resources import delta
    from resources.config import Tuning

    out, tuning = {}, Tuning.from_env()
    for table in TABLE_NAMES:
        t0 = time.perf_counter()
        uri, order = lake.table_uri(table), None if table in UNPARTITIONED else "record_id"
        done = delta.compact(uri, target_size=tuning.target_mb * MB, order_by=order,
                             cluster_max_bytes=tuning.cluster_max_mb * MB)
        before, after = done["files_before"], delta.vacuum(uri, 0)["files_after"]
        out[table] = {"seconds": round(time.perf_counter() - t0, 1), "files_before": before,
                      "files_after": after, "clustered": done["clustered"],
                      "peak_rss_mb_so_far": vm("VmHWM")}
        say(f"  compacted {table}: {before} -> {after} files (clustered: "
            f"{done['clustered'] or '-'}), {out[table]['seconds']} s, "
            f"peak RSS so far {out[table]['peak_rss_mb_so_far']:,.0f} MB")
    return out


def watchdog(limit_mb: float) -> None:
    """Stop this process (not the machine's others) if it grows past `limit_mb`: the
    machine is shared, and delta-rs's rewrites can take all of its memory."""
    import threading

    def watch():
        while True:
            if vm("VmRSS") > limit_mb:
                print(f"analyst_scale: this process passed {limit_mb:.0f} MB resident; "
                      "stopped (see --max-parent-mb)", file=sys.stderr, flush=True)
                os._exit(3)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True, name="watchdog").start()


TABLE_NAMES = ("transactions", "balance_periodic", "balance_history", "accounts", "income",
               "income_streams", "landings", "checks", "records")


def hourly(maker: Maker, lake, runs: int, batch: int, say, took: list | None = None,
           keep=lambda: None) -> dict:
    """A day of hourly runs: each run's batch of random records written back as the
    pipeline's runs write them (their rows replaced, transactions for the refresh's window;
    snapshots, landings and checks appended; `records` rewritten). `took`: the runs done
    already (a resumed level), each kept (`keep()`) as it ends."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from resources import delta
    from resources.tables import schema

    rng = np.random.default_rng([maker.seed, 24])
    since = dt.datetime.combine(END - WINDOW, dt.time(), LAGOS).astimezone(dt.UTC)
    took = [] if took is None else took
    updated = {}
    for hour in range(runs):
        t0, seconds = time.perf_counter(), {}
        numbers = np.sort(rng.choice(maker.n, batch, replace=False))
        ids = [maker.record_ids[i] for i in numbers]
        fetched = midnight_ms(END) + 19 * 3_600_000 + (hour + 1) * 150_000
        if hour < len(took):  # done before the level was stopped: only its draws again
            updated.update(dict.fromkeys(ids, fetched))
            continue
        run = f"{hour:08x}-hour-0000-0000-000000000000"
        for table in ("accounts", "balance_periodic", "income", "income_streams",
                      "transactions"):
            t1 = time.perf_counter()
            rows = lake.read_many(table, ids, schema(table))
            window = None
            if table == "transactions":
                rows = {r: t.filter(pc.greater_equal(t["trans_date"], pa.scalar(
                    since, t.schema.field("trans_date").type))) for r, t in rows.items()}
                window = {r: since for r in rows}
            lake.replace(table, rows, schema(table), window=window)
            seconds[table] = round(time.perf_counter() - t1, 2)
        t1 = time.perf_counter()
        latest = lake.read_many("balance_history", ids, schema("balance_history"))
        newest = {r: t.filter(pc.equal(t["fetched_at"], pc.max(t["fetched_at"])))
                  for r, t in latest.items()}
        lake.append("balance_history", {r: t.set_column(1, "fetched_at", stamps(
            np.full(len(t), fetched))) for r, t in newest.items()}, schema("balance_history"))
        seconds["balance_history"] = round(time.perf_counter() - t1, 2)
        rec = pa.array(ids, pa.string())
        counts = lake.row_counts("transactions", ids)
        t1 = time.perf_counter()
        lake.append_rows("landings", maker.landings(rec, hour, np.array(
            [counts.get(r, 0) for r in ids]), run), schema("landings"))
        lake.append_rows("checks", maker.checks(rec, hour, run), schema("checks"))
        seconds["landings_checks"] = round(time.perf_counter() - t1, 2)
        t1 = time.perf_counter()
        updated.update(dict.fromkeys(ids, fetched))
        lake.write("records", None, maker.records(np.arange(maker.n), updated),
                   schema=schema("records"))
        seconds["records"] = round(time.perf_counter() - t1, 2)
        t1 = time.perf_counter()
        for table in TABLE_NAMES:
            delta.vacuum(lake.table_uri(table), 0)
        seconds["vacuum"] = round(time.perf_counter() - t1, 2)
        took.append({"seconds": round(time.perf_counter() - t0, 1), **seconds})
        keep()
        say(f"  hour {hour + 1}: {took[-1]['seconds']} s (transactions {seconds['transactions']}"
            f" s)")
    return {"runs": runs, "batch": batch, "each": took,
            "total_s": round(sum(t["seconds"] for t in took), 1)}


def layout(lake, probe: str, probes: list[str]) -> dict:
    """Each table's files as the views read them: files, bytes, row groups and their rows;
    whether record_id has statistics, and how many files and row groups a lookup of one
    record (and of `probes`) cannot skip by them."""
    import bisect

    import pyarrow.parquet as pq

    out = {}
    sorted_probes = sorted(probes)
    for table in TABLE_NAMES:
        files = [f.removeprefix("file://") for f in lake.files(table)]
        groups, stats, hit_files, hit_groups, hit_many, size = [], True, 0, 0, 0, 0
        for path in files:
            meta = pq.ParquetFile(path).metadata
            size += os.path.getsize(path)
            col = meta.schema.names.index("record_id") if "record_id" in meta.schema.names \
                else None
            in_file = False
            for g in range(meta.num_row_groups):
                rg = meta.row_group(g)
                groups.append(rg.num_rows)
                if col is None:
                    continue
                st = rg.column(col).statistics
                if st is None or not st.has_min_max:
                    stats = False
                    hit_groups += 1
                    hit_many += 1
                    in_file = True
                    continue
                if st.min <= probe <= st.max:
                    hit_groups += 1
                    in_file = True
                lo = bisect.bisect_left(sorted_probes, st.min)
                if lo < len(sorted_probes) and sorted_probes[lo] <= st.max:
                    hit_many += 1
            hit_files += in_file
        out[table] = {
            "files": len(files), "bytes": size, "rows": sum(groups), "row_groups": len(groups),
            "rows_per_row_group": {"median": int(statistics.median(groups)) if groups else 0,
                                   "max": max(groups, default=0)},
            "record_id_stats": stats if "record_id" in _columns(table) else None,
            "one_record_reads": {"files": hit_files, "row_groups": hit_groups},
            "thousand_records_read_row_groups": hit_many}
    return out


def _columns(table: str) -> list[str]:
    from resources.tables import columns

    return list(columns(table))


# == the questions ==============================================================================

def q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def src(files: dict[str, list[str]], table: str) -> str:
    """A table's snapshot as a good analyst reads it: read_parquet over its files."""
    return "read_parquet([" + ", ".join(q(f) for f in files[table]) + "])"


def hand_daily(files: dict, where: str) -> str:
    """End-of-day balances, one row per account and day from its first known day to its
    last, of the records `where` picks (pushed into both scans): the day's last posted line's
    running balance, else the service's end-of-day figure, else the last one before."""
    return f"""
with posted as (
    select record_id, account_id, timezone('{TZ}', cleared_date)::date as date,
           arg_max(balance, (cleared_date, transaction_id)) as balance
    from {src(files, 'transactions')}
    where {where} and cleared_date is not null and balance is not null
    group by record_id, account_id, date
), service as (
    select record_id, account_id, date, ledger_balance, available_balance
    from {src(files, 'balance_periodic')}
    where {where}
), known as (
    select record_id, account_id, date,
           coalesce(p.balance, s.ledger_balance) as balance, s.available_balance,
           case when p.balance is null then 'periodic' else 'transactions' end as source
    from posted p full join service s using (record_id, account_id, date)
), calendar as (
    select record_id, account_id,
           unnest(generate_series(min(date), max(date), interval 1 day))::date as day
    from known group by record_id, account_id
)
select c.record_id, c.account_id, c.day as date, k.balance, k.available_balance, k.source,
       k.date <> c.day as carried_forward
from calendar c asof join known k
  on c.record_id = k.record_id and c.account_id = k.account_id and c.day >= k.date"""


def hand_q5(files: dict) -> str:
    """q5 by hand: the last 30 days' balances, carried forward from the last known one
    before the window where a day has none."""
    s = f"date '{LAST30}'"
    return f"""
with lines as (
    select record_id, account_id, timezone('{TZ}', cleared_date)::date as date, cleared_date,
           transaction_id, balance
    from {src(files, 'transactions')}
    where cleared_date is not null and balance is not null
), line_days as (
    select record_id, account_id, date, arg_max(balance, (cleared_date, transaction_id)) as b
    from lines where date >= {s} group by all
), line_before as (
    select record_id, account_id, max(date) as date,
           arg_max(balance, (cleared_date, transaction_id)) as b
    from lines where date < {s} group by all
), service as (
    select record_id, account_id, date, ledger_balance as b
    from {src(files, 'balance_periodic')}
), service_before as (
    select record_id, account_id, max(date) as date, arg_max(b, date) as b
    from service where date < {s} group by all
), known as (
    select record_id, account_id, date, coalesce(l.b, p.b) as b
    from line_days l full join (select * from service where date >= {s}) p
      using (record_id, account_id, date)
    union all
    select record_id, account_id,
           case when l.date is not null and (p.date is null or l.date >= p.date)
                then l.date else p.date end,
           case when l.date is not null and (p.date is null or l.date >= p.date)
                then l.b else p.b end
    from line_before l full join service_before p using (record_id, account_id)
), calendar as (
    select record_id, account_id,
           unnest(generate_series(greatest(min(date), {s}), max(date), interval 1 day))::date
             as day
    from known group by record_id, account_id
)
select c.day as date, sum(k.b) as total, count(k.b) as balances,
       sum(k.b) / count(k.b) as average
from calendar c asof join known k
  on c.record_id = k.record_id and c.account_id = k.account_id and c.day >= k.date
group by c.day"""


PER_RECORD = {  # view -> the lake table it shows (None: derived by hand)
    "daily_balances": None, "transactions": "transactions", "balances": None,
    "accounts": "accounts", "income_summary": "income", "landings": "landings",
    "checks": "checks", "records": "records"}
WITH_CUSTOMER = {"transactions", "accounts", "income_summary"}


def questions(files: dict, shown: dict, record: str, customer: str, many: list[str]) -> list:
    """(name, kind, view SQL, by-hand SQL, compared columns) of every question."""
    out = []
    in_list = "(" + ", ".join(q(r) for r in many) + ")"

    def cols(view: str, table: str) -> str:
        lake_cols = set(_columns(table))
        return ", ".join(f'"{c}"' for c, _, _ in shown[view] if c in lake_cols)

    for view, table in PER_RECORD.items():
        for who, where in (("one record", f"record_id = {q(record)}"),
                           ("one customer", f"customer_id = {q(customer)}"),
                           ("1,000 records", f"record_id in {in_list}")):
            hand_where = where
            if who == "one customer" and view not in WITH_CUSTOMER:
                where = f"record_id in (select record_id from accounts where {where})"
                hand_where = (f"record_id in (select record_id from {src(files, 'accounts')} "
                              f"where customer_id = {q(customer)})")
            view_sql = f"select * from {view} where {where}"
            if view == "daily_balances":
                hand = hand_daily(files, hand_where)
            elif view == "balances":
                hand = (f"select {cols(view, 'balance_history')} from "
                        f"{src(files, 'balance_history')} where {hand_where} qualify "
                        "row_number() over (partition by account_id order by fetched_at desc, "
                        "service_updated_at desc nulls last) = 1")
            else:
                hand = f"select {cols(view, table)} from {src(files, table)} where {hand_where}"
            name = "q1" if (view, who) == ("daily_balances", "one record") else \
                f"{view}: {who}"
            out.append((name, "lookup", view_sql, hand))
    since = f"timestamptz '{LAST30} 00:00:00+01'"
    out.append(("q2", "lookup",
                f"select * from transactions where record_id = {q(record)} "
                f"and trans_date >= {since}",
                f"select {cols('transactions', 'transactions')} from "
                f"{src(files, 'transactions')} where record_id = {q(record)} "
                f"and trans_date >= {since}"))
    nxt = (MONTH + dt.timedelta(days=32)).replace(day=1)
    out.append(("q3", "whole", f"select * from monthly_cashflow where month = date '{MONTH}'",
                f"select record_id, account_id, date '{MONTH}' as month, "
                "any_value(currency) as currency, count(*) as transactions, "
                "coalesce(sum(credit), 0) as inflow, coalesce(sum(debit), 0) as outflow, "
                "coalesce(sum(credit), 0) - coalesce(sum(debit), 0) as net "
                f"from {src(files, 'transactions')} where cleared_date is not null "
                f"and trans_date >= timestamptz '{MONTH} 00:00:00+01' "
                f"and trans_date < timestamptz '{nxt} 00:00:00+01' "
                "group by record_id, account_id"))
    month = f"date_trunc('month', timezone('{TZ}', trans_date))::date"
    out.append(("q4", "whole",
                f"select {month} as month, sum(credit) as inflow, sum(debit) as outflow "
                "from transactions where not pending group by 1",
                f"select {month} as month, sum(credit) as inflow, sum(debit) as outflow "
                f"from {src(files, 'transactions')} where cleared_date is not null group by 1"))
    out.append(("q5", "whole",
                "select date, sum(balance) as total, count(balance) as balances, "
                "sum(balance) / count(balance) as average from daily_balances "
                f"where date >= date '{LAST30}' group by date",
                hand_q5(files)))
    out.append(("q6", "top",
                "select * from income_summary order by average_monthly_income desc, "
                "record_id limit 100",
                f"select {cols('income_summary', 'income')} from {src(files, 'income')} "
                "order by average_monthly_income desc, record_id limit 100"))
    out.append(("q7", "whole", "select count(*) as n from transactions",
                f"select count(*) as n from {src(files, 'transactions')}"))
    order = {"q1": 1, "q2": 2, "q3": 3, "q4": 4, "q5": 5, "q6": 6, "q7": 7}
    return sorted(out, key=lambda x: (order.get(x[0], 8), x[0]))


def shorten(sql: str) -> str:
    """SQL as the JSON keeps it: each file list named, not spelt."""
    def named(m: re.Match) -> str:
        n = m[0].count("'") // 2
        table = re.search(r"/([a-z_]+)/[^/']*\.parquet", m[0])
        return f"read_parquet(<{table[1] if table else '?'}: {n} files>)"

    return re.sub(r"read_parquet\(\[[^\]]*\]\)", named, " ".join(sql.split()))


# == the child: one query, in a process of its own =============================================

def vm(field: str) -> float:
    kib = re.search(rf"^{field}:\s+(\d+)", Path("/proc/self/status").read_text(), re.M)[1]
    return round(int(kib) / 1024, 1)


def child(job: dict) -> dict:
    import resource

    sys.path.insert(0, job.get("root", str(ROOT)))  # the code measured (--code)
    from pipeline.cli.sql import open_warehouse

    con = open_warehouse(Path(job["warehouse"]), job["lake"])
    ready = vm("VmRSS")
    if job.get("explain"):
        rows = con.sql("explain analyze " + job["sql"]).fetchall()
        return {"plan": rows[0][1]}
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    result = con.sql(job["sql"]).to_arrow_table()
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    out = {"wall_s": round(wall, 4), "peak_mb": vm("VmHWM"), "ready_mb": ready,
           "cpu_s": round(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, 3),
           "rows": result.num_rows}
    if job.get("out"):
        import pyarrow.parquet as pq

        pq.write_table(result, job["out"])
    return out


def run_child(job: dict, work: Path, timeout: float, max_rss_mb: float) -> dict:
    """`job` in a fresh process; stopped (and said so) past `timeout` or `max_rss_mb`."""
    path, said, told = work / "job.json", work / "child.out", work / "child.err"
    path.write_text(json.dumps(job))
    with said.open("w") as stdout, told.open("w") as stderr:  # files: a pipe would fill
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child",
                                 str(path)], cwd=job.get("root", ROOT), stdout=stdout,
                                stderr=stderr)
    deadline, worst = time.monotonic() + timeout, 0.0
    stopped = None
    while proc.poll() is None:
        try:
            kib = re.search(r"^VmRSS:\s+(\d+)", Path(f"/proc/{proc.pid}/status").read_text(),
                            re.M)
            worst = max(worst, int(kib[1]) / 1024 if kib else 0)
        except OSError:
            pass
        if worst > max_rss_mb or time.monotonic() > deadline:
            stopped = f"over {max_rss_mb:.0f} MB" if worst > max_rss_mb else \
                f"over {timeout:.0f} s"
            proc.kill()
            break
        time.sleep(0.05)
    proc.wait()
    stdout, stderr = said.read_text(), told.read_text()
    if stopped:
        return {"stopped": stopped, "peak_mb": round(worst, 1)}
    if proc.returncode != 0:
        return {"error": stderr.strip().splitlines()[-1][:500] if stderr.strip() else
                f"exit {proc.returncode}"}
    return json.loads(stdout.strip().splitlines()[-1])


def same(a: Path, b: Path) -> dict:
    """Whether two answers hold the same rows (as multisets) in the columns both have."""
    import duckdb

    with duckdb.connect() as con:
        ca = [r[0] for r in con.execute(f"describe select * from read_parquet({q(str(a))})")
              .fetchall()]
        cb = {r[0] for r in con.execute(f"describe select * from read_parquet({q(str(b))})")
              .fetchall()}
        common = [c for c in ca if c in cb]
        sel = ", ".join(f'"{c}"' for c in common)
        na, nb = (con.execute(f"select count(*) from read_parquet({q(str(p))})").fetchone()[0]
                  for p in (a, b))
        diff = con.execute(
            f"select (select count(*) from (select {sel} from read_parquet({q(str(a))}) "
            f"except all select {sel} from read_parquet({q(str(b))}))), "
            f"(select count(*) from (select {sel} from read_parquet({q(str(b))}) "
            f"except all select {sel} from read_parquet({q(str(a))})))").fetchone()
    return {"equal": na == nb and diff == (0, 0), "rows": [na, nb],
            "differing_rows": list(diff), "compared": common,
            "only_in_view": [c for c in ca if c not in cb]}


def ask(name: str, view_sql: str, hand_sql: str, base: dict, work: Path, args) -> dict:
    """One question, each side `args.runs` times in turns, in fresh processes."""
    sides = {"view": view_sql, "hand": hand_sql}
    got: dict[str, list] = {"view": [], "hand": []}
    failed: dict[str, str] = {}
    load = os.getloadavg()[0]
    for k in range(args.runs):
        for side in harness.rotated(list(sides), k):
            if side in failed:
                continue
            out = work / f"answer-{side}.parquet" if k == 0 else None
            res = run_child({**base, "sql": sides[side], "out": out and str(out)}, work,
                            args.timeout, args.max_rss_mb)
            if "wall_s" not in res:
                failed[side] = res.get("stopped") or res.get("error")
                got[side].append(res)
                continue
            got[side].append(res)
    out: dict = {"question": name, "load_avg_1m": round(load, 2),
                 "view_sql": shorten(view_sql), "hand_sql": shorten(hand_sql)}
    for side, runs in got.items():
        ok = [r for r in runs if "wall_s" in r]
        if side in failed:
            out[side] = {"failed": failed[side], "peak_mb": max(
                (r.get("peak_mb", 0) for r in runs), default=None), "runs": len(runs)}
        else:
            out[side] = {k: round(statistics.median(r[k] for r in ok), 3)
                         for k in ("wall_s", "cpu_s", "peak_mb")} | {
                "ready_mb": ok[0]["ready_mb"], "rows": ok[0]["rows"], "runs": len(ok),
                "walls": [r["wall_s"] for r in ok]}
    if not failed:
        out["answers"] = same(work / "answer-view.parquet", work / "answer-hand.parquet")
        out["wall_ratio"] = round(out["view"]["wall_s"] / max(out["hand"]["wall_s"], 1e-4), 2)
        out["peak_ratio"] = round(out["view"]["peak_mb"] / out["hand"]["peak_mb"], 2)
    for side in sides:
        (work / f"answer-{side}.parquet").unlink(missing_ok=True)
    return out


EXPLAINED = ("q1", "transactions: one record", "balances: one record", "q3", "q5", "q7")


def measure(lake, warehouse: Path, maker: Maker, work: Path, args, say,
            result: dict | None = None, keep=lambda: None) -> dict:
    """Build the warehouse over the lake as it stands, then every question, both ways.
    `result`: what a stopped level measured already (its build and questions), filled in
    place and kept (`keep()`) after each question."""
    import numpy as np

    import assets.warehouse as wh

    result = {} if result is None else result
    if "warehouse_build_s" not in result or not warehouse.exists():
        result.update(_built(lake, warehouse, say, wh))
        keep()
    files = {t: [f.removeprefix("file://") for f in lake.files(t)] for t in TABLE_NAMES}
    shown = wh.warehouse_columns(warehouse)
    rng = np.random.default_rng([maker.seed, 3])
    record = maker.record_ids[0]  # its customer has two records (0 and 1)
    customer = strings(maker.customer_hex[[maker.customer[0]]]).to_pylist()[0]
    many = [maker.record_ids[i] for i in rng.choice(maker.n, min(1000, maker.n), replace=False)]
    base = {"warehouse": str(warehouse), "lake": lake.root, "root": str(CODE)}
    if "layout" not in result:  # read from every file's footer: once a level's layout
        result["layout"] = layout(lake, record, many)
    result.setdefault("questions", [])
    result.setdefault("explain", {})
    asked = {x["question"] for x in result["questions"]}
    for name, kind, view_sql, hand_sql in questions(files, shown, record, customer, many):
        if name in asked:
            continue
        got = ask(name, view_sql, hand_sql, base, work, args)
        got["kind"] = kind
        result["questions"].append(got)
        keep()
        say(f"    {line(got)}")
    for name, _, view_sql, _ in questions(files, shown, record, customer, many):
        if name in EXPLAINED and not args.quick and name not in result["explain"]:
            got = run_child({**base, "sql": view_sql, "explain": True}, work, args.timeout,
                            args.max_rss_mb)
            plan = got.get("plan")
            result["explain"][name] = got if plan is None else plan[:40_000]
            keep()
    return result


def _built(lake, warehouse: Path, say, wh) -> dict:
    """The warehouse built over the lake as it stands: how long, what the refresh did."""
    t0 = time.perf_counter()
    refreshed = None
    if hasattr(wh, "publish"):  # derived tables brought up to date, then the views
        _, done = wh.publish(lake.root, warehouse, progress=lambda m: say(f"    {m}"))
        if done is not None:
            refreshed = {"mode": done.mode, "records": done.records, "rows": done.rows,
                         "seconds": round(done.seconds, 2)}
    else:  # code before the derived tables: views only
        wh.build(lake.root, warehouse)
    return {"warehouse_build_s": round(time.perf_counter() - t0, 2),
            "derived_refresh": refreshed}


def line(x: dict) -> str:
    def side(s: dict) -> str:
        if "failed" in s:
            return f"stopped ({s['failed']})"
        return f"{s['wall_s']:.3f} s {s['cpu_s']:.2f} cpu {s['peak_mb']:.0f} MB"

    eq = x.get("answers", {}).get("equal")
    return (f"{x['question']}: view {side(x['view'])} | hand {side(x['hand'])}"
            + (f" | x{x['wall_ratio']} wall x{x['peak_ratio']} peak, equal {eq}"
               if "wall_ratio" in x else ""))


# == the level, the table ======================================================================

def level(records: int, args, say, save=lambda out: None) -> dict:
    """One level: the lake made and compacted, the questions asked, a day of hourly runs,
    the questions asked again. With --keep, what is done is written to the level's folder
    (level.json) after each step, each question and each hourly run, and `--resume FOLDER`
    goes on from there (a generation, from the commits its lake holds): a level of a million
    records takes longer than one sitting."""
    import numpy as np  # noqa: F401  (loaded before the clock)

    from resources.lake import Lake

    work = args.resume or Path(tempfile.mkdtemp(prefix=f"analyst-{records}-", dir=args.work))
    kept = work / "level.json"
    out: dict = json.loads(kept.read_text()) if args.resume else {
        "records": records, "code": args.code and code_commit(args.code),
        "load_avg_1m_start": round(os.getloadavg()[0], 2)}
    if args.resume and out["code"] != (args.code and code_commit(args.code)):
        raise SystemExit(f"{work} was measured with --code {out['code']}: resume with it")

    t_level, before_level = time.perf_counter(), out.get("seconds", 0.0)

    def keep() -> None:  # the level's seconds: over every sitting, to its last step kept
        out["seconds"] = round(before_level + time.perf_counter() - t_level, 1)
        if args.keep:
            tmp = kept.with_name("level.json.tmp")
            tmp.write_text(json.dumps(out, indent=1, default=str))
            os.replace(tmp, kept)
        save(out)

    def measured(layout: str) -> None:
        result = out.setdefault(layout, {})
        if "seconds" in result:
            return
        t0, before = time.perf_counter(), result.pop("seconds_so_far", 0.0)

        def keep_measuring() -> None:
            result["seconds_so_far"] = round(before + time.perf_counter() - t0, 1)
            keep()

        measure(lake, work / "warehouse.duckdb", maker, work, args, say, result,
                keep_measuring)
        result.pop("seconds_so_far", None)
        result["seconds"] = round(before + time.perf_counter() - t0, 1)
        keep()

    try:
        lake = Lake(root=str(work / "lake"))
        maker = Maker(records, args.seed, lake)
        if "generation" not in out:
            out.setdefault("per_commit", args.per_commit)  # a resumed level's, as it began
            keep()  # from here, --resume goes on with the chunks the lake holds
            say(f"{records:,} records: generating into {work}")
            out["generation"] = generate(maker, lake, out["per_commit"], say)
            keep()
        if "compaction" not in out:
            out["compaction"] = compact(lake, say)
            out["lines"] = lake_rows(lake, "transactions")
            keep()
        if args.make_only:
            return out
        say(f"{records:,} records: {out['lines']:,} lines; compacted lake, questions")
        measured("compacted")
        if "hourly_runs" not in out:
            say(f"{records:,} records: a day of hourly runs")
            out["hourly_runs"] = hourly(maker, lake, args.hourly_runs, HOURLY_BATCH, say,
                                        out.setdefault("hourly_runs_done", []), keep)
            out.pop("hourly_runs_done")
            keep()
        measured("hourly")
        out["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
        keep()
        return out
    finally:
        if args.keep:
            say(f"kept {work}" + ("" if "load_avg_1m_end" in out else
                                  f": go on with --resume {work}"))
        else:
            shutil.rmtree(work, ignore_errors=True)


def lake_rows(lake, table: str) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f.removeprefix("file://")).metadata.num_rows
               for f in lake.files(table))


def verdicts(result: dict) -> list[str]:
    out = []
    t = TARGETS
    for lv in result["levels"]:
        for lay in ("compacted", "hourly"):
            if lay not in lv:
                continue
            met = missed = 0
            worst, alone = [], []
            for x in lv[lay]["questions"]:
                if "wall_ratio" not in x and _alone(x):  # by hand did not fit: the view did
                    met += 1
                    alone.append(f"{x['question']} (by hand: {x['hand']['failed']})")
                if "wall_ratio" not in x or x["kind"] == "top":
                    continue
                v = x["view"]
                if x["kind"] == "lookup":
                    ok = (v["wall_s"] <= t["lookup_s"] and x["wall_ratio"] <= t["lookup_ratio"]
                          and v["peak_mb"] <= t["lookup_mb"])
                else:
                    ok = (x["wall_ratio"] <= t["whole_ratio"]
                          and x["peak_ratio"] <= t["whole_mem_ratio"]
                          and v["peak_mb"] <= t["whole_mb"])
                ok = ok and x["answers"]["equal"]
                met += ok
                missed += not ok
                if not ok:
                    worst.append(x["question"])
            failed = [x["question"] for x in lv[lay]["questions"]
                      if "wall_ratio" not in x and not _alone(x)]
            out.append(f"{'✓' if not missed and not failed else '✗'} {lv['records']:,} records, "
                       f"{lay}: {met} of {met + missed + len(failed)} questions meet their "
                       "target" + (f"; missed: {', '.join(worst)}" if worst else "")
                       + (f"; stopped: {', '.join(failed)}" if failed else "")
                       + (f"; the view alone answered: {', '.join(alone)}" if alone else ""))
    return out


def _alone(x: dict) -> bool:
    """Whether only the view answered, within a whole-lake question's limit, while by hand
    was stopped past the child's memory or time (its answer is compared at the smaller
    levels, where by hand fits)."""
    v = x["view"]
    return ("failed" in x["hand"] and "wall_s" in v and x["kind"] == "whole"
            and v["peak_mb"] <= TARGETS["whole_mb"])


def table_md(result: dict) -> str:
    def cell(s: dict) -> str:
        if "failed" in s:
            return f"stopped, {s['failed']}"
        return f"{s['wall_s']:.3g} · {s['cpu_s']:.3g} · {s['peak_mb']:,.0f}"

    parts = []
    for lay, title in (("compacted", "As compaction leaves it"),
                       ("hourly", "After a day of hourly runs")):
        rows, levels = [], [lv for lv in result["levels"] if lay in lv]
        if not levels:
            continue
        for name in [x["question"] for x in levels[0][lay]["questions"]]:
            for lv in levels:
                x = next(y for y in lv[lay]["questions"] if y["question"] == name)
                eq = x.get("answers", {}).get("equal")
                rows.append((name if lv is levels[0] else "", f"{lv['records']:,}",
                             cell(x["view"]), cell(x["hand"]),
                             f"{x['wall_ratio']}x" if "wall_ratio" in x else "",
                             f"{x['peak_ratio']}x" if "peak_ratio" in x else "",
                             "" if eq is None else ("yes" if eq else "**no**")))
        runs = sorted({x[side]["runs"] for lv in levels for x in lv[lay]["questions"]
                       for side in ("view", "hand") if "runs" in x[side]} or {result["runs"]})
        how = "one run" if runs == [1] else f"median of {' or '.join(map(str, runs))} runs"
        parts.append(f"{title} (s · CPU s · peak MB, {how}):\n\n"
                     + harness.table(["question", "records", "view", "by hand",
                                      "view/hand wall", "view/hand peak", "same answer"],
                                     rows, left=2))
    lines = []
    for lv in result["levels"]:
        g, hours = lv["generation"], lv.get("hourly_runs")
        text = (f"- {lv['records']:,} records, {lv['lines']:,} lines"
                + (f" (views, build and writer at {lv['code']})" if lv.get("code") else "")
                + f": made in {g['total_s']} s "
                f"({g['commits']} commits), compacted in "
                f"{sum(c['seconds'] for c in lv['compaction'].values()):.0f} s")
        if hours:
            text += (f", {hours['runs']} hourly runs in {hours['total_s']} s (transactions' "
                     f"commit {min(h['transactions'] for h in hours['each'])}-"
                     f"{max(h['transactions'] for h in hours['each'])} s each)")
        text += ("; questions " + " + ".join(f"{lv[lay]['seconds']} s" for lay in
                                              ("compacted", "hourly")
                                              if lv.get(lay, {}).get("seconds") is not None)
                 + f"; load {lv.get('load_avg_1m_start')} -> {lv.get('load_avg_1m_end')}.")
        for lay in ("compacted", "hourly"):
            if t := lv.get(lay, {}).get("layout", {}).get("transactions"):
                text += (f" transactions {lay}: {t['files']} files, {t['row_groups']} row "
                         f"groups of ~{t['rows_per_row_group']['median']:,} rows "
                         f"({t['bytes'] / 2**30:.2f} GiB), one record's lookup cannot skip "
                         f"{t['one_record_reads']['row_groups']} of them "
                         f"({t['one_record_reads']['files']} files).")
        lines.append(text + (f" {lv['note']}" if lv.get("note") else ""))
    return "\n\n".join(parts) + "\n\n" + "\n".join(lines) + "\n\n" + "\n".join(
        f"- {v}" for v in result["verdicts"])


CODE = ROOT  # the tree whose views, warehouse build and writer are measured


def code_commit(rev: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev],
                          capture_output=True, text=True, check=True).stdout.strip()


def code_at(rev: str, work: Path | None) -> Path:
    """The tracked files of `rev`, unpacked (the working tree, which others edit, untouched)."""
    where = Path(tempfile.mkdtemp(prefix=f"code-{code_commit(rev)}-", dir=work))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return where


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default="10000,100000,1000000",
                    help="the levels, records, comma-separated (1,000,000: hours)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each side (median)")
    ap.add_argument("--per-commit", type=int, default=50_000,
                    help="records a commit of the first landing")
    ap.add_argument("--hourly-runs", type=int, default=24)
    ap.add_argument("--seed", type=int, default=20261128)
    ap.add_argument("--timeout", type=float, default=600, help="seconds a query may take")
    ap.add_argument("--max-rss-mb", type=float, default=12_000,
                    help="a query's child is stopped past this resident set")
    ap.add_argument("--max-parent-mb", type=float, default=14_000,
                    help="this process stops itself past this resident set")
    ap.add_argument("--work", type=Path, default=None, help="where the lakes are made")
    ap.add_argument("--keep", action="store_true",
                    help="keep the lakes, and each level's progress (see --resume)")
    ap.add_argument("--resume", type=Path, metavar="FOLDER",
                    help="go on with a level stopped part-way (its folder analyst-N-*, kept by "
                         "--keep), from its last step, question, hourly run or generation "
                         "commit; its figures go to the partial file only (see --publish), "
                         "unless --out is given")
    ap.add_argument("--make-only", action="store_true",
                    help="make and compact the lake, then stop (with --keep): making it need "
                         "not be quiet, the questions do; go on later with --resume")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 2,000 records, one run each, commits of 1,000, 6 "
                         "hourly runs")
    ap.add_argument("--publish", type=Path, nargs="+", metavar="JSON",
                    help="publish the levels of earlier runs' JSON (each run's partial file: "
                         "analyst_scale.partial.json under --work) instead of measuring")
    ap.add_argument("--code", metavar="REV",
                    help="measure the views and writer of this commit (e.g. HEAD), unpacked "
                         "aside, not the working tree's (others may be editing it)")
    ap.add_argument("--measure-lake", type=Path, metavar="DIR",
                    help="only ask the questions of a lake kept by --keep (its folder "
                         "analyst-N-*; --records N and --seed as it was made), as it stands")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    harness.arguments(ap, "analyst_scale")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child.read_text()))), flush=True)
        return 0
    if args.publish:
        runs = [json.loads(p.read_text()) for p in args.publish]
        result = {**runs[0], "levels": sorted((lv for r in runs for lv in r["levels"]),
                                              key=lambda lv: lv["records"])}
        result["verdicts"] = verdicts(result)
        harness.publish(result, args, "analyst_scale", table_md(result))
        return 0
    if args.quick:
        args.records, args.runs, args.per_commit, args.hourly_runs = "2000", 1, 1000, 6
    global CODE
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)
    if args.code:  # the views and writer of a commit, whatever the working tree holds now
        CODE = code_at(args.code, args.work)
    sys.path.insert(0, str(CODE))
    import assets.warehouse

    if not assets.warehouse.__file__.startswith(str(CODE)):
        raise SystemExit(f"measuring {assets.warehouse.__file__}, not the code at {CODE}")
    watchdog(args.max_parent_mb)
    levels = [int(x) for x in args.records.split(",")]
    if args.resume:
        if not (args.resume / "level.json").exists():
            raise SystemExit(f"{args.resume} holds no level.json: not a level kept by --keep")
        levels = [json.loads((args.resume / "level.json").read_text())["records"]]
        args.keep, args.work = True, args.work or args.resume.parent
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)

    def say(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    result = {"runs": args.runs, "code": args.code and code_commit(args.code), "targets": TARGETS, "days": DAYS, "end_day": str(END),
              "per_commit": args.per_commit, "hourly_batch": HOURLY_BATCH, "levels": []}
    partial = (args.work or Path(tempfile.gettempdir())) / "analyst_scale.partial.json"
    if args.measure_lake:  # a kept lake, as it stands: its figures to the partial file only
        from resources.lake import Lake

        lake = Lake(root=str(args.measure_lake / "lake"))
        maker = Maker(levels[0], args.seed, lake)
        work = Path(tempfile.mkdtemp(prefix="measure-", dir=args.work))
        t0 = time.perf_counter()
        got = measure(lake, work / "warehouse.duckdb", maker, work, args, say)
        got["seconds"] = round(time.perf_counter() - t0, 1)
        shutil.rmtree(work, ignore_errors=True)
        partial.write_text(json.dumps({**result, "levels": [
            {"records": levels[0], "lines": lake_rows(lake, "transactions"), "as_it_stands": got,
             "load_avg_1m_end": round(os.getloadavg()[0], 2)}]}, indent=1, default=str))
        return 0

    def save(current: dict | None = None) -> None:  # what is measured, should a later part die
        done = {**result, "levels": result["levels"] + ([current] if current else [])}
        partial.write_text(json.dumps(done, indent=1, default=str))

    if args.make_only and not args.keep:
        raise SystemExit("--make-only keeps the lake for a later --resume: add --keep")
    for n in levels:
        result["levels"].append(level(n, args, say, save))
        save()
    if args.make_only:
        return 0
    result["verdicts"] = verdicts(result)
    if args.resume and not args.out:  # one level of a run in sittings: the others' figures
        print(table_md(result))  # stay until its parts are published together
        say(f"{partial} holds this level: publish it with the others' parts, --publish "
            f"{partial} ...")
        return 0
    harness.publish(result, args, "analyst_scale", table_md(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
