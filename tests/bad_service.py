"""A stand-in service whose every answer is one page of two lines, the second breaking the
rules (both debit and credit set). The sandbox never serves bad data, so this fault needs a
server of its own: a real HTTP server on loopback, not a mock."""

from __future__ import annotations

import http.server
import threading

import orjson

GOOD = {"_id": "t1", "account": "acc1", "record": "rec1", "customer": "c1", "bank": "b1",
        "trans_date": "2026-11-01T10:00:00.000Z", "cleared_date": "2026-11-01T10:00:00.000Z",
        "debit": 100.0, "credit": None, "balance": 900.0, "currency": "NGN",
        "notes": {"desc": "POS", "topics": []}, "ref": "r1", "branch": "x", "code": "POS",
        "env": "production-sandbox", "created_at": "2026-11-01T10:00:00.000Z",
        "last_updated": "2026-11-01T10:00:00.000Z"}
BAD = {**GOOD, "_id": "t2", "credit": 50.0}


class BadPages:
    def __init__(self) -> None:
        body = orjson.dumps({"status": "success", "message": "ok", "data": {
            "pagination": {"totalDocs": 2, "limit": 100, "page": 1, "totalPages": 1,
                           "pagingCounter": 1, "hasPrevPage": False, "hasNextPage": False,
                           "prevPage": None, "nextPage": None},
            "transaction": [GOOD, BAD]}})

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
