-- payments: one row per payment from PAYMENT and PAYMENT_RECURRING callbacks. Amounts are
-- kobo in the lake; `amount` is the same in naira.
create or replace view payments as
select
    *,
    amount_kobo / 100 as amount
from {lake:payments};
