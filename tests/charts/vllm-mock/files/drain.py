"""preStop drain for a vLLM pod.

1. Wait --endpoint-sync-seconds, always in full: routers need that long to stop sending new
   requests, and the pod cannot see when they have.
2. Poll --metrics-url until vllm:num_requests_running and vllm:num_requests_waiting are both 0,
   for at most --drain-seconds. Every poll's timeout and every pause count against that budget,
   so this step never overruns it. A poll that fails, or a reply without both metrics, counts
   as busy.
Exits 0 in every case: the kubelet sends SIGTERM next, and vLLM's --shutdown-timeout covers
whatever is left.
"""
import argparse
import sys
import time
import urllib.request

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"


def totals(text):
    """Sum of each metric over its series; only exact names count (not *_total and the like)."""
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name_end = len(line)
        for sep in ("{", " ", "\t"):
            index = line.find(sep)
            if index != -1:
                name_end = min(name_end, index)
        name = line[:name_end]
        if name not in (RUNNING, WAITING):
            continue
        rest = line[name_end:]
        if rest.startswith("{"):
            close = rest.rfind("}")
            rest = rest[close + 1:] if close != -1 else ""
        fields = rest.split()
        if not fields:
            continue
        try:
            found[name] = found.get(name, 0.0) + float(fields[0])
        except ValueError:
            continue
    return found


def idle(url, timeout):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            found = totals(response.read().decode("utf-8", "replace"))
    except Exception:  # noqa: BLE001 - any failure means "cannot tell", which is busy
        return False
    return RUNNING in found and WAITING in found and found[RUNNING] == 0 and found[WAITING] == 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint-sync-seconds", type=float, default=5)
    parser.add_argument("--drain-seconds", type=float, default=60)
    parser.add_argument("--metrics-url", default="http://127.0.0.1:8000/metrics")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--request-timeout", type=float, default=1.0)
    args = parser.parse_args()

    time.sleep(max(args.endpoint_sync_seconds, 0))
    deadline = time.monotonic() + max(args.drain_seconds, 0)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            print("drain: still busy at the end of drainSeconds; handing over to SIGTERM", file=sys.stderr)
            return 0
        if idle(args.metrics_url, min(args.request_timeout, remaining)):
            print("drain: vLLM is idle", file=sys.stderr)
            return 0
        remaining = deadline - time.monotonic()
        if remaining > 0:
            time.sleep(min(args.interval, remaining))


if __name__ == "__main__":
    sys.exit(main())
