-- monthly_cashflow: money in, money out and the net per account and calendar month, in the
-- customer's time zone (LEDGERLAKE_TIMEZONE, Africa/Lagos by default) and by each line's
-- value date (trans_date). inflow sums the credits and outflow the debits, both as positive
-- naira, exactly (decimal sums); net = inflow - outflow. Pending lines (not posted yet, maybe
-- never) are left out.
--
-- A lake table the warehouse's build keeps for the records whose lines
-- moved (assets/sql/derived/monthly_cashflow.sql), read as it is.
create or replace view monthly_cashflow as
select *
from {lake:monthly_cashflow};
