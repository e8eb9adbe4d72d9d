-- The sandbox's state (sandbox/store.py): documents as JSON beside the columns that
-- look them up.
create table if not exists meta (key text primary key, value blob not null);
create table if not exists customers (
    id text primary key, env text not null, doc blob not null);
create table if not exists records (
    id text primary key, env text not null, customer text not null, doc blob not null);
create index if not exists records_customer on records (customer);
create table if not exists accounts (
    id text primary key, env text not null, record text not null, doc blob not null);
create index if not exists accounts_record on accounts (record);
create table if not exists payments (
    id text primary key, env text not null, record text not null, doc blob not null);
create index if not exists payments_record on payments (record);
create table if not exists tokens (
    id text primary key, env text not null, record text not null, doc blob not null);
