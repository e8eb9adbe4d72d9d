"""The sandbox posts at every hour (docs/interface.md), so the demo's own data crosses Lagos
midnight: a line posted between 23:00 and 24:00 UTC falls on the next day in Lagos (UTC+1,
no daylight saving), and the views count it there."""

from __future__ import annotations

import duckdb
import pytest

LAGOS = "interval 1 hour"  # Lagos is UTC+1 all year


@pytest.mark.slow
def test_lines_posted_before_utc_midnight_count_on_the_next_lagos_day(demo):
    assert demo.out.returncode == 0, demo.out.stdout + demo.out.stderr
    with duckdb.connect(str(demo.home / "warehouse.duckdb"), read_only=True) as con:
        con.execute("set timezone = 'UTC'")
        late = con.execute(
            "select count(*) from transactions where not pending"
            " and hour(cleared_date) = 23").fetchone()[0]
        assert late > 0, "the demo's data has no line posted between 23:00 and 24:00 UTC"

        # a late line that is its account's last of the Lagos day: that day's balance is its
        # running balance (by the UTC date, it would be the day before's)
        rows = con.execute(f"""
            with posted as (
                select account_id, transaction_id, cleared_date, balance,
                       (cleared_date + {LAGOS})::date as lagos_day,
                       row_number() over (partition by account_id, (cleared_date + {LAGOS})::date
                                          order by cleared_date desc, transaction_id desc) as k
                from transactions where not pending and balance is not null)
            select p.account_id, p.lagos_day, p.cleared_date::date, p.balance, d.balance
            from posted p join daily_balances d
              on d.account_id = p.account_id and d.date = p.lagos_day
            where p.k = 1 and hour(p.cleared_date) = 23""").fetchall()
        assert rows, "no late line ends its Lagos day"
        for account, lagos_day, utc_day, balance, shown in rows:
            assert lagos_day > utc_day
            assert shown == balance, (account, lagos_day)

        # each month's cash flow by the Lagos date of each line's value date, to the kobo
        want = con.execute(f"""
            select account_id, date_trunc('month', trans_date + {LAGOS})::date as month,
                   count(*), coalesce(sum(credit), 0), coalesce(sum(debit), 0)
            from transactions where not pending group by all order by all""").fetchall()
        got = con.execute("""
            select account_id, month, transactions, inflow, outflow
            from monthly_cashflow order by all""").fetchall()
        assert got == want
