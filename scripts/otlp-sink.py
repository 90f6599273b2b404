#!/usr/bin/env python3
# A loopback OTLP/HTTP sink for benchmarks with traces on: answers every export with an empty
# success and writes how many it received to COUNT_FILE after each.
# usage: scripts/otlp-sink.py PORT COUNT_FILE   (then OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:PORT)
import http.server
import sys

received = 0


class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        global received
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        received += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
        with open(sys.argv[2], "w") as count:
            count.write(str(received))

    def log_message(self, *args):
        pass


if len(sys.argv) != 3:
    sys.exit("usage: scripts/otlp-sink.py PORT COUNT_FILE")
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
