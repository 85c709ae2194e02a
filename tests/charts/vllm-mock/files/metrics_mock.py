"""Answers every Prometheus instant query with one fixed value (for driving an LLMScaler)."""
import argparse
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, default=9090)
parser.add_argument("--value", default="0.5")
args = parser.parse_args()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if not self.path.startswith("/api/v1/query"):
            self.send_response(404)
            self.end_headers()
            return
        body = json.dumps({
            "status": "success",
            "data": {"resultType": "vector", "result": [{"metric": {}, "value": [time.time(), args.value]}]},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


ThreadingHTTPServer(("0.0.0.0", args.port), Handler).serve_forever()
