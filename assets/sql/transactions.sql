-- transactions: one row per transaction line. `amount` is signed (credit positive, debit
-- negative) and `balance` is the running balance after the line, both exact naira
-- (decimal(18,2)). `trans_date` is the value date, `cleared_date` when the line posted; a
-- pending line (authorised, not posted yet: it may post under a new id or be reversed) has
-- neither cleared_date nor balance, and `pending` says so. A narration's runs of 7 or more
-- digits show their last 4 only; the raw narration stays sealed in the lake (`ledgerlake
-- reveal` opens it).
create or replace view transactions as
select
    * exclude (narration_sealed),
    cleared_date is null as pending
from {lake:transactions};
