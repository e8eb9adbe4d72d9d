-- Webhook deliveries (sandbox/webhooks.py): one row per event sent, or to send, to one URL.
create table if not exists deliveries (
    id integer primary key autoincrement,
    env text not null,
    record text,
    method text,
    event_key text not null,      -- what /callback/trigger re-sends the latest of
    code text,
    url text,                     -- null: no webhook was set when it was raised
    target text,                  -- scheme://host:port, the unit of concurrency
    payload blob not null,
    raised_at real not null,
    first_attempt real,
    next_attempt real,
    last_attempt real,
    attempts blob not null default '[]',
    state text not null,          -- pending, acknowledged, dropped, unsent
    urls blob                     -- the URLs it goes round (null: url alone)
);
create index if not exists deliveries_due on deliveries (state, next_attempt);
create index if not exists deliveries_record on deliveries (env, record, method);
