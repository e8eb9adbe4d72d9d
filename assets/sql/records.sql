-- records: one row per record: connected, disconnected or reauth_required; the last
-- callback the pipeline received for it; and per product (auth, identity, accounts,
-- balance, transactions, income, payment) the code and time of that product's last
-- callback (<product>_code, <product>_at).
create or replace view records as
select
    *,
    status = 'connected'       as is_connected,
    status = 'reauth_required' as needs_reauth
from {lake:records};
