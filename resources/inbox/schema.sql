-- The inbox's tables (resources/inbox/store.py). Each dialect (sqlite.py, postgres.py) names
-- what is in braces here: the types and the indexes of an event's identity. SQLite splits it
-- at each semicolon: a comment holds none.
create table if not exists events (
    id {serial},
    identity {text} not null,
    received_at {real} not null,
    kind {text} not null,
    method {text},
    code {text},
    status {text},
    record {text},
    account {text},
    customer {text},
    occurred_at {text},
    affects {text},
    body {blob} not null
);
-- An event's identity is unique, and events are read by record: the dialect's indexes
{events_identity};
create index if not exists events_account on events (account) where account is not null;
create table if not exists dead_letters (
    id {serial},
    received_at {real} not null,
    reason {text} not null,
    body {blob} not null
);
create table if not exists records (
    record {text} primary key,
    customer {text},
    status {text} not null,
    status_at {text} not null,
    status_event {integer} not null,
    first_seen {real} not null,
    last_seen {real} not null,
    replayed_at {real}
);
create index if not exists records_customer on records (customer);
create table if not exists record_products (
    record {text} not null,
    method {text} not null,
    code {text} not null,
    status {text},
    event {integer} not null,
    occurred_at {text} not null,
    received_at {real} not null,
    primary key (record, method)
);
-- read by when they came: the net under lost runs looks at each callback once (lost.py)
create index if not exists record_products_received on record_products (received_at);
-- `landings`: each record's product as the pipeline last left it (LandingState), so that
-- what a record needs, and what is stale, is one indexed read whatever the number of
-- records.
create table if not exists landings (
    record {text} not null,
    product {text} not null,
    outcome {text} not null,
    run_id {text} not null,
    at {real} not null,
    landed_at {real},
    row_count {integer},
    detail {text},
    primary key (record, product)
);
create index if not exists landings_run on landings (run_id, product);
create index if not exists landings_to_act on landings (outcome) where outcome != 'landed';
-- Each record's number: what the orchestrator names a record by (run config, tags, metadata,
-- logs), never its id, so a forgotten record leaves no trace in Dagster's storage
-- (docs/privacy.md). Given when the inbox first hears of a record, deleted by forget, never
-- given twice.
create table if not exists record_numbers (
    number {serial},
    record {text} not null unique
);
-- The tombstones (a record id's SHA-256, never the id, and when): a forgotten record's
-- callbacks are dropped, it gets no number again, and no landing writes it.
create table if not exists forgotten (
    record {text} primary key,
    forgotten_at {real} not null
);
-- One row the receiver's /health rewrites when no callback was stored lately: a write the
-- inbox refuses (a full disk, a read-only file, a database refusing writes) makes it 503.
create table if not exists write_probe (
    id {integer} primary key check (id = 1),
    at {real} not null
);
