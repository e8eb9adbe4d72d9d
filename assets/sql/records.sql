-- records: one row per record: connected, disconnected or reauth_required, and the last
-- callback the pipeline received for it (its method names the product).
create or replace view records as
select
    *,
    status = 'connected'       as is_connected,
    status = 'reauth_required' as needs_reauth
from {lake:records};
