-- transactions: one row per transaction line. `amount` is signed (credit positive, debit
-- negative) and `balance` is the running balance after the line.
create or replace view transactions as
select *
from {lake:transactions};
