"""The connection service's API: a plain httpx SDK (no Dagster), pages as they arrive.

Retries live here and only here: 429 waits for `Retry-After` (or backs off when it is missing
or 0); 5xx, BANK_NOT_RESPONDING, timeouts, dropped connections and 2xx bodies cut short (not
JSON) back off with jitter; all of it within `retry_budget_s`, and all but 429s within
`max_attempts`. Everything else raises at once.
A page is yielded only after its answer is whole, so a retried page is never yielded twice.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import functools
import logging
import random
import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import httpx
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from resources.inbox.callbacks import RECORD_ID as ID  # every id the API takes has its form
from resources.wire import (
    TRANSACTION_SCHEMA,
    read_transaction_pages,
    transactions_batch,
    wire_batch,
)

from .errors import DamagedAnswer, MalformedResponse, ServiceError, TransportError, from_response

log = logging.getLogger("ledgerlake.client")

BASE_PATHS = {"production": "/v2/", "sandbox": "/sandbox/v2/"}
KEY = re.compile(r"^[!-~]{1,512}$")  # visible ASCII: anything else could break the header
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
TRIGGER_BATCH = 100  # the spec's limit of records per /callback/trigger
PARSE_PAGES = 20  # transaction pages read by one call of Arrow's JSON reader

# No answer, but one may come on a new try; the rest (a bad URL scheme, a header httpx refuses,
# a body it cannot decode) would fail the same way again.
_TRANSIENT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
# Raised before the service can have acted: safe to retry even a call that changes state.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@functools.cache
def tls_context():
    """The trust store, loaded once a process: it costs ~20 ms to build, which every client
    would otherwise pay."""
    return httpx.create_ssl_context()


class _Secret:
    """The key, kept where no repr, dump or vars() of the client shows it."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "'***'"


class Client:
    """Calls `/v2/` (production) or `/sandbox/v2/` (sandbox) with the environment's secret key,
    over one keep-alive connection pool, made at the first call."""

    def __init__(self, base_url: str, secret_key: str, environment: str = "sandbox", *,
                 connect_timeout_s: float = 5.0, read_timeout_s: float = 30.0,
                 max_attempts: int = 6, retry_budget_s: float = 60.0,
                 backoff_base_s: float = 0.25, backoff_max_s: float = 8.0,
                 page_size: int = 100) -> None:
        if environment not in BASE_PATHS:
            raise ValueError(f"environment must be one of {sorted(BASE_PATHS)}, "
                             f"not {environment!r}")
        if not re.fullmatch(r"https?://[^/\s?#]+/?", base_url):
            raise ValueError(f"base_url must be http(s)://host[:port], not {base_url!r:.80}")
        if not KEY.fullmatch(secret_key or ""):
            # Say what is wrong with the key without showing any of it.
            raise ValueError(f"secret_key must be 1 to 512 visible ASCII characters "
                             f"(got {len(secret_key or '')} characters)")
        if not 1 <= page_size <= 100 or max_attempts < 1:
            raise ValueError("page_size must be 1 to 100 and max_attempts at least 1")
        self.base_url, self.environment = base_url, environment
        self._key = _Secret(secret_key)
        self.connect_timeout_s, self.read_timeout_s = connect_timeout_s, read_timeout_s
        self.max_attempts, self.retry_budget_s = max_attempts, retry_budget_s
        self.backoff_base_s, self.backoff_max_s = backoff_base_s, backoff_max_s
        self.page_size = page_size
        self._http: httpx.Client | None = None
        self._urls: dict[str, httpx.URL] = {}  # a path's whole URL, merged once

    def __repr__(self) -> str:  # never the key
        return f"Client({self.base_url!r}, environment={self.environment!r})"

    # -- lifecycle ---------------------------------------------------------------------------
    def _client(self) -> httpx.Client:
        if self._http is None:
            self._http = httpx.Client(
                base_url=self.base_url.rstrip("/") + BASE_PATHS[self.environment],
                verify=tls_context(),
                timeout=httpx.Timeout(self.read_timeout_s, connect=self.connect_timeout_s),
                limits=httpx.Limits(max_keepalive_connections=8, keepalive_expiry=30.0),
                headers={"Authorization": f"Bearer {self._key.value}",
                         "Content-Type": "application/json",
                         "Accept": "application/json"},
            )
        return self._http

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the wire ----------------------------------------------------------------------------
    def post(self, path: str, body: dict[str, Any], *, idempotent: bool = True) -> dict:
        """POST `body` as JSON; the answer's `data`. `idempotent=False`: retry only unsent."""
        return self._request("POST", path, content=orjson.dumps(body), idempotent=idempotent)

    def get(self, path: str, params: dict[str, str] | None = None) -> dict:
        return self._request("GET", path, params=params)

    def _request(self, method: str, path: str, *, content: bytes | None = None,
                 params: dict | None = None, idempotent: bool = True,
                 envelope: bool = False, raw: bool = False, tried: int = 0) -> Any:
        """The answer's `data` (`envelope`: the whole body; `raw`: a RawAnswer), sent once a try,
        tried again as `_retry_wait` says. `tried`: failed tries spent on this call elsewhere."""
        deadline = time.monotonic() + self.retry_budget_s
        attempt = failed = tried
        while True:
            attempt += 1
            answer = self._send_once(method, path, content, params, raw)
            if not isinstance(answer, ServiceError):
                return answer if raw or envelope else answer["data"]
            # A 429 is the service pacing its callers, not a failure: it spends the time budget,
            # never an attempt, so runs that share a rate limit slow down together rather than
            # fail when many of them were told to wait at once.
            failed += answer.http_code != 429
            wait = self._retry_wait(answer, attempt, failed, deadline, idempotent)
            log.warning("retrying %s %s in %.2fs (attempt %d of %d): %s", method, path, wait,
                        attempt + 1, self.max_attempts, answer)
            time.sleep(wait)

    def _send_once(self, method: str, path: str, content: bytes | None, params: dict | None,
                   raw: bool) -> Any:
        """One try: the answer (a RawAnswer if `raw`, else as `_envelope` reads it), or the
        ServiceError it amounts to, returned for the retry policy. It sends what `http.request`
        would (`send` adds the timeout), its URL merged once a path: merging it and the headers
        into each call cost ~0.15 of a page's ~0.7 ms of CPU."""
        http = self._client()
        if (url := self._urls.get(path)) is None:
            url = self._urls[path] = http.build_request(method, path).url
        try:
            resp = http.send(httpx.Request(method, url, params=params, content=content,
                                           headers=http.headers, cookies=http.cookies))
        except httpx.RequestError as exc:
            # An httpx error's message holds no header but its `.request` does: keep only the
            # message, and return the error from outside a raise so that it has no __context__.
            err = TransportError(f"{type(exc).__name__}: {str(exc) or 'no detail'}",
                                 method=method, path=path)
            err.transient, err.unsent = isinstance(exc, _TRANSIENT), isinstance(exc, _NOT_SENT)
            return err
        answer = RawAnswer(resp.content, resp.status_code, resp.headers.get("x-request-id"))
        if resp.status_code >= 400:
            return from_response(answer.status, _json_or_none(answer.content), answer.request_id,
                                 method=method, path=path, retry_after=_retry_after(resp.headers))
        return answer if raw else _envelope(answer, method, path)  # raw: Arrow's reader parses it

    def _retry_wait(self, err: ServiceError, attempt: int, failed: int, deadline: float,
                    idempotent: bool) -> float:
        """The retry policy: seconds to wait before trying again after `err`, or `err` raised
        (telling its attempts) when it is not worth a try or the tries or the time are spent."""
        if err.http_code == 429 and err.retry_after:
            wait = err.retry_after
        elif _worth_retrying(err, idempotent):
            ceiling = min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))
            wait = ceiling / 2 + random.uniform(0, ceiling / 2)
        else:
            raise err.after(attempt) from None
        if failed >= self.max_attempts:
            raise err.after(attempt) from None
        if time.monotonic() + wait > deadline:
            raise err.after(attempt, f"retry budget of {self.retry_budget_s:g}s "
                                     f"spent (next wait {wait:.1f}s)") from None
        return wait

    # -- paging ------------------------------------------------------------------------------
    def pages(self, path: str, body: dict[str, Any], key: str, *, first: int = 1,
              last: int | None = None) -> Iterator[list[dict]]:
        """Yield each page's items as it arrives, following `hasNextPage`/`nextPage`, from
        page `first` to page `last` (None: to the end)."""
        page = first
        while page is not None:
            data = self.post(path, {**body, "page": page, "limit": self.page_size})
            items, pagination = _page_parts(data, key, page, path)
            yield items
            page = _following(pagination, page, last, path)

    # -- endpoints (INTERFACE.md) ------------------------------------------------------------
    def auth_by_customer(self, customer: str) -> list[dict]:
        """Every Auth record of one user (all pages)."""
        return _flat(self.pages("auth/getByCustomer", {"customer": _id("customer", customer)},
                                "auths"))

    def auth(self, record: str) -> dict:
        return self.post("auth/get", {"record": _id("record", record)})["auth"]

    def accounts(self, record: str | None = None, *, customer: str | None = None) -> list[dict]:
        return _flat(self.pages("accounts/get", _one_of(record=record, customer=customer),
                                "accounts"))

    def balance(self, record: str | None = None, *, account: str | None = None) -> list[dict]:
        return _flat(self.pages("balance/get", _one_of(record=record, account=account), "balance"))

    def transaction_pages(self, record: str | None = None, *, account: str | None = None,
                          from_date: dt.date | str | None = None,
                          to_date: dt.date | str | None = None, first_page: int = 1,
                          last_page: int | None = None) -> Iterator[list[dict]]:
        """Pages of `/transactions/get` as the service sent them, lazily (`first_page` to
        `last_page`, None: to the end)."""
        body = self._transactions_body(record, account, from_date, to_date)
        return self.pages("transactions/get", body, "transaction", first=first_page,
                          last=last_page)

    def transaction_total(self, record: str | None = None, *, account: str | None = None,
                          from_date: dt.date | str | None = None,
                          to_date: dt.date | str | None = None) -> int:
        """How many transactions a pull would bring (one one-line page asked for)."""
        body = self._transactions_body(record, account, from_date, to_date)
        pagination = self.post("transactions/get", {**body, "page": 1, "limit": 1}
                               ).get("pagination")
        total = pagination.get("totalDocs") if isinstance(pagination, dict) else None
        if isinstance(total, bool) or not isinstance(total, int) or total < 0:
            raise MalformedResponse("transactions/get answered without a totalDocs count",
                                    method="POST", path="transactions/get")
        return total

    @staticmethod
    def _transactions_body(record, account, from_date, to_date) -> dict[str, Any]:
        body = _one_of(record=record, account=account)
        if from_date is not None:
            body["from"] = _date("from_date", from_date)
        if to_date is not None:
            body["to"] = _date("to_date", to_date)
        if "from" in body and "to" in body and body["from"] > body["to"]:
            raise ValueError(f"from_date {body['from']} is after to_date {body['to']}")
        return body

    def transaction_batches(self, record: str | None = None, *, account: str | None = None,
                            from_date: dt.date | str | None = None,
                            to_date: dt.date | str | None = None) -> Iterator[pa.RecordBatch]:
        """Each page as an Arrow batch of `columns.TRANSACTION_SCHEMA`, as it arrives."""
        for rows in self.transaction_pages(record, account=account, from_date=from_date,
                                           to_date=to_date):
            yield transactions_batch(rows)

    def transactions(self, record: str | None = None, *, account: str | None = None,
                     from_date: dt.date | str | None = None,
                     to_date: dt.date | str | None = None, first_page: int = 1,
                     last_page: int | None = None) -> pa.Table:
        """All transactions of a record (or `account=`), `from_date`/`to_date` inclusive;
        or those of pages `first_page` to `last_page` (`transaction_groups`, held at once)."""
        return pa.Table.from_batches(list(self.transaction_groups(
            record, account=account, from_date=from_date, to_date=to_date,
            first_page=first_page, last_page=last_page)), schema=TRANSACTION_SCHEMA)

    def transaction_groups(self, record: str | None = None, *, account: str | None = None,
                           from_date: dt.date | str | None = None,
                           to_date: dt.date | str | None = None, first_page: int = 1,
                           last_page: int | None = None) -> Iterator[pa.RecordBatch]:
        """The rows of `transactions` as they are read, PARSE_PAGES pages a batch (at least
        one batch, maybe empty): a record's lines need never be held at once.

        The pages' bytes go to Arrow's JSON reader PARSE_PAGES at a time, not through orjson
        and Python dicts (~4 against ~7 us of CPU a row). Once a page has said how many pages
        there are, the next ones are asked for before the last is parsed; each page's own
        pagination is checked when it is parsed, and one that disagrees (the data changed
        while we read) drops the pages asked for after it and paging goes on from its
        nextPage, as `pages` does.
        """
        body = self._transactions_body(record, account, from_date, to_date)
        path = "transactions/get"
        page, pages_in_all = first_page, None
        group: list[tuple[int, RawAnswer]] = []
        while True:
            answer = self._request("POST", path, raw=True, content=orjson.dumps(
                {**body, "page": page, "limit": self.page_size}))
            group.append((page, answer))
            if pages_in_all is None:  # the pull's first page: how many are there?
                pages_in_all = _total_pages(answer.content)
            if (pages_in_all is not None and page < pages_in_all and page != last_page
                    and len(group) < PARSE_PAGES):
                page += 1  # pages run 1..totalPages: ask before parsing, checked below
                continue
            rows, pages = _read_pages(group, path, lambda n, damaged: self._refetch_damaged_page(
                path, {**body, "page": n, "limit": self.page_size}, damaged))
            kept = 0
            for number, pagination, count in pages:
                kept += count
                page = _following(pagination, number, last_page, path)
                if page != number + 1:
                    break  # the end, or the pages asked for after this one are not next
            group = []
            yield rows.slice(0, kept)
            if page is None:
                return
            total = pagination.get("totalPages")
            pages_in_all = total if type(total) is int else None

    def _refetch_damaged_page(self, path: str, body: dict, damaged: DamagedAnswer) -> dict:
        """A page whose answer came cut short, asked for again (that answer spent a try)."""
        if self.max_attempts <= 1:
            raise damaged
        log.warning("asking again for page %s of POST %s: %s", body["page"], path, damaged)
        return self._request("POST", path, content=orjson.dumps(body), tried=1)

    def income(self, record: str | None = None, *, customer: str | None = None) -> dict:
        return self.post("income/get", _one_of(record=record, customer=customer))["income"]

    def identity(self, record: str | None = None, *, customer: str | None = None) -> list[dict]:
        # INTERFACE.md: identity/get takes no page or limit; its one page holds them all
        return self.post("identity/get", _one_of(record=record, customer=customer))["identity"]

    def record(self, record: str) -> dict:
        return self.post("record/get", {"record": _id("record", record)})["record"]

    def remove_record(self, record: str) -> dict:
        """Remove the record; its access token dies. Not retried once it may have been sent."""
        return self.post("record/remove", {"record": _id("record", record)}, idempotent=False)

    def item(self, record: str | None = None, *, access_token: str | None = None) -> dict:
        return self.post("item/get", _one_of(record=record, access_token=access_token))["item"]

    def callback_status(self, record: str, method: str) -> dict:
        """GET /callback: the product's data and process status for one record and method."""
        if not isinstance(method, str) or not re.fullmatch(r"[A-Z_]{1,40}", method):
            raise ValueError(f"method must be an upper-case product method such as "
                             f"TRANSACTIONS, not {method!r}")
        return self.get("callback", {"record": _id("record", record), "method": method})

    def trigger_callbacks(self, records: Iterable[str], url: str | None = None) -> list[str]:
        """Re-send the records' webhooks, 100 records per call; the service's message per call.

        A resend may duplicate events, which receivers deduplicate, so each call is retried.
        """
        ids = [_id("records[]", r) for r in ([records] if isinstance(records, str) else records)]
        if not ids:
            raise ValueError("records must hold at least one record id")
        extra = {"url": _url(url)} if url is not None else {}
        said = []
        for start in range(0, len(ids), TRIGGER_BATCH):
            try:
                envelope = self._request("POST", "callback/trigger", content=orjson.dumps(
                    {"records": ids[start:start + TRIGGER_BATCH], **extra}), envelope=True)
            except ServiceError as err:
                if start:
                    raise err.after(err.attempts, f"{start} of {len(ids)} records were "
                                                  f"triggered before this call failed") from None
                raise
            said.append(str(envelope.get("messgae") or envelope.get("message") or ""))
        return said

    def exchange_token(self, public_token: str) -> dict:
        """Swap a public token for `{access_token, record}`; it works once, so never retried."""
        return self.post("token/exchange", {"public_token": _id("public_token", public_token)},
                         idempotent=False)

    def set_webhook(self, url: str, token: str | None = None) -> dict:
        token_member = {} if token is None else {"token": token}
        return self.post("settings/webhook", {"url": _url(url), **token_member})

    def banks(self) -> list[dict]:
        return self.get("banks/list")["banks"]


# -- helpers -----------------------------------------------------------------------------------

class RawAnswer(NamedTuple):
    """A 2xx answer left unparsed, with what an error about it must say."""
    content: bytes
    status: int
    request_id: str | None


def _page_parts(data: dict, key: str, page: int, path: str) -> tuple[list, dict]:
    """A page's items and pagination, checked: both present, and the page the one asked for."""
    items, pagination = data.get(key), data.get("pagination")
    if not isinstance(items, list) or not isinstance(pagination, dict):
        raise MalformedResponse(f"page {page} has no `{key}` array or no pagination",
                                method="POST", path=path)
    if pagination.get("page", page) != page:
        raise MalformedResponse(f"asked for page {page}, got {pagination.get('page')}",
                                method="POST", path=path)
    return items, pagination


def _following(pagination: dict, page: int, last: int | None, path: str) -> int | None:
    """The page after `page`, or None at the end (no next page, or `last` reached)."""
    if not pagination.get("hasNextPage") or page == last:
        return None
    following = pagination.get("nextPage")
    if isinstance(following, bool) or not isinstance(following, int) or following <= page:
        raise MalformedResponse(f"page {page} says hasNextPage but nextPage is "
                                f"{following!r}", method="POST", path=path)
    return following


def _read_pages(group: list[tuple[int, RawAnswer]], path: str,
                again: Callable[[int, DamagedAnswer], dict]
                ) -> tuple[pa.RecordBatch, list[tuple[int, dict, int]]]:
    """The rows of a group of transaction pages, and each page's (number, pagination, rows).

    One Arrow JSON read for the group; a group Arrow cannot read as expected (bad JSON, a
    wrong type, a missing member) is read again page by page through orjson, which either
    reads it after all or raises the error that names the page and what is wrong. A page whose
    body is not JSON at all (cut short on the way) is asked for again: `again(page, error)` is
    its `data`, retried as any request is.
    """
    parsed = read_transaction_pages([answer.content for _, answer in group])
    if parsed is not None:
        statuses, paginations, lists = parsed
        if all(status == "success" and isinstance(pg, dict) and pg.get("page", n) in (n, None)
               for status, pg, (n, _) in zip(statuses, paginations, group, strict=True)):
            counts = pc.list_value_length(lists).to_pylist()
            return wire_batch(lists.flatten()), [
                (n, pg, c) for (n, _), pg, c in zip(group, paginations, counts, strict=True)]
    batches, pages = [], []
    for number, answer in group:
        body = _envelope(answer, "POST", path)
        data = again(number, body) if isinstance(body, DamagedAnswer) else body["data"]
        items, pagination = _page_parts(data, "transaction", number, path)
        batches.append(transactions_batch(items))
        pages.append((number, pagination, len(items)))
        if not pagination.get("hasNextPage"):
            break  # pages asked for after the last one are not read
    return pa.concat_batches(batches), pages


def _total_pages(raw: bytes) -> int | None:
    """`data.pagination.totalPages` of a page, read by orjson: a hint that lets the pages
    after the first be asked for before it is parsed (Arrow's reader costs ~0.5 ms a call,
    orjson ~0.15 ms a page). Checked page by page when the group is parsed."""
    body = _json_or_none(raw)
    data = body.get("data") if isinstance(body, dict) else None
    pagination = data.get("pagination") if isinstance(data, dict) else None
    total = pagination.get("totalPages") if isinstance(pagination, dict) else None
    return total if type(total) is int else None


def _envelope(answer: RawAnswer, method: str, path: str) -> dict | DamagedAnswer:
    """A 2xx answer's success envelope. A body that is not JSON was most likely cut short on
    the way: its DamagedAnswer is returned, for the call to be tried again; other JSON raises."""
    body = _json_or_none(answer.content)
    if (isinstance(body, dict) and body.get("status") == "success"
            and isinstance(body.get("data"), dict)):
        return body
    kind, got = ((DamagedAnswer, "a body that is not JSON") if body is None
                 else (MalformedResponse, "JSON without status and data"))
    err = kind(f"a {answer.status} answer with {got} ({len(answer.content)} bytes)",
               http_code=answer.status, request_id=answer.request_id, method=method, path=path)
    if body is not None:
        raise err
    return err


def _worth_retrying(err: ServiceError, idempotent: bool) -> bool:
    """Whether another try of the call that failed with `err` may succeed, and is safe."""
    status = err.http_code
    if isinstance(err, TransportError):  # a request that left may have been acted on
        return err.transient and (idempotent or err.unsent)
    if isinstance(err, DamagedAnswer):  # a 2xx: the call was carried out, only its answer lost
        return idempotent
    if status is not None and status >= 500:
        # A 5xx of a call that changes state may have been half done; maintenance and 503
        # say it was not done at all.
        return idempotent or status == 503 or err.error_code == "PLANNED_MAINTENANCE"
    return status == 429 or err.error_code == "BANK_NOT_RESPONDING"


def _json_or_none(raw: bytes) -> object:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds from a `Retry-After` of delta-seconds or an HTTP date; None if absent or bad."""
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds())


def _flat(pages: Iterator[list[dict]]) -> list[dict]:
    return [item for page in pages for item in page]


def _id(name: str, value: object) -> str:
    if not isinstance(value, str) or not ID.fullmatch(value):
        raise ValueError(f"{name} must match ^[A-Za-z0-9_-]{{1,64}}$, not {value!r:.80}")
    return value


def _one_of(**given: str | None) -> dict[str, str]:
    """The body naming exactly one of the alternatives (record, customer, account...)."""
    body = {k: _id(k, v) for k, v in given.items() if v is not None}
    if len(body) != 1:
        raise ValueError(f"give exactly one of {', '.join(given)}")
    return body


def _date(name: str, value: dt.date | str) -> str:
    text = value.isoformat()[:10] if isinstance(value, dt.date) else value
    try:
        if not isinstance(text, str) or not DATE.fullmatch(text):
            raise ValueError
        dt.date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{name} must be a date or YYYY-MM-DD, not {value!r:.40}") from None
    return text


def _url(value: object) -> str:
    if not isinstance(value, str) or not re.match(r"^https?://[^\s]+$", value):
        raise ValueError(f"url must be an http(s) URL, not {value!r:.80}")
    return value
