"""Every column declared once (resources/tables.py) and shown everywhere: the Dagster asset
column tables with each column's class, DuckDB's catalog of the warehouse file,
docs/columns.md."""

from __future__ import annotations

import duckdb
import pytest

from assets import catalog, warehouse
from assets.warehouse import build, load_views
from resources import privacy, tables


@pytest.fixture(scope="module")
def empty_warehouse(tmp_path_factory):
    """The warehouse over an empty lake: every view, typed as over any lake."""
    folder = tmp_path_factory.mktemp("catalog")
    build(folder / "lake", folder / "w.duckdb")
    return folder / "w.duckdb"


def test_the_named_personal_data_is_never_public():
    named = {"identity": ["bvn", "nin", "phones", "emails", "addresses", "sealed", "firstname",
                          "lastname", "fullname", "birth_year"],
             "accounts": ["nuban", "name", "customer_name"],
             "payments": ["debit_account", "credit_account"]}
    for table, columns in named.items():
        for column in columns:
            assert privacy.classify(table, column) != "public", (table, column)
    for column in ("bvn", "nin", "phones", "emails", "addresses"):
        assert privacy.classify("identity", column) == "sensitive"
    with pytest.raises(ValueError, match="identity.shoe_size has no class"):
        privacy.classify("identity", "shoe_size")


def test_the_dagster_column_table_shows_each_class():
    from assets.identity import identity

    schema = identity.specs_by_key[next(iter(identity.keys))].metadata["dagster/column_schema"]
    shown = {c.name: (c.tags or {}).get("class") for c in schema.columns}
    assert shown["bvn"] == "sensitive" and shown["firstname"] == "personal"
    assert shown["customer_id"] == "public" and None not in shown.values()


def test_what_the_views_add_is_theirs(empty_warehouse):
    with duckdb.connect(str(empty_warehouse), read_only=True) as con:
        for view, told in catalog.VIEW_COLUMNS.items():
            have = {r[0] for r in con.execute("select column_name from duckdb_columns() "
                                              "where table_name = ?", [view]).fetchall()}
            assert set(told) <= have, view


def test_duckdb_shows_every_view_and_column_description(empty_warehouse):
    views = {v.name: v for v in load_views()}
    with duckdb.connect(str(empty_warehouse), read_only=True) as con:
        comments = dict(con.execute("select view_name, comment from duckdb_views() "
                                    "where not internal").fetchall())
        assert comments == {name: v.comment for name, v in views.items()}
        assert all(len(c) > 20 for c in comments.values())
        missing = con.execute("select c.table_name, c.column_name from duckdb_columns() c "
                              "join duckdb_views() v on v.view_name = c.table_name "
                              "where not v.internal and coalesce(c.comment, '') = ''"
                              ).fetchall()
        assert missing == []
        told = dict(con.execute("select column_name, comment from duckdb_columns() "
                                "where table_name = 'transactions'").fetchall())
    assert told["pending"] == catalog.VIEW_COLUMNS["transactions"]["pending"]
    assert told["record_id"] == tables.RECORD_ID.description
    # a view reading a lake table through another view takes the lake's descriptions
    assert catalog.view_descriptions("balances", {v.name: (set(v.tables | v.optional),
                                                           v.needs) for v in views.values()}
                                     )["ledger_balance"] == \
        tables.columns("balance_history")["ledger_balance"].description


def test_docs_columns_md_is_what_the_declarations_say():
    assert warehouse.DOC.read_text() == warehouse.markdown(), \
        "docs/columns.md is stale: run `.venv/bin/python -m assets.warehouse`"


def test_the_dagster_column_tables_carry_the_descriptions():
    from pipeline.definitions import defs

    graph = defs.resolve_asset_graph()
    shown = {}
    for node in graph.asset_nodes:
        schema = node.metadata.get("dagster/column_schema")
        if schema is not None:
            shown[node.key.to_user_string()] = {c.name: c.description
                                                for c in getattr(schema, "value", schema).columns}
    products = {"accounts", "balances", "transactions", "income", "identity", "payments"}
    assert products | {"record_status"} <= set(shown)
    for asset, columns in shown.items():
        assert [c for c, d in columns.items() if not d] == [], asset
    assert shown["transactions"]["amount"] == tables.columns("transactions")["amount"].description
    assert "record_id" in shown["balances"] and "fetched_at" in shown["balances"]
