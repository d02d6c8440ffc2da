#!/usr/bin/env python3
"""Minimal CQL native-protocol v4 client (stdlib only), used by scripts/services.

    cql_ping.py [--host H] [--port P] [--timeout S] [--consistency C] [--quiet]
                [--cafile CA] [--user U --password-file F] [QUERY ... | -]

Sends STARTUP, then each QUERY (default: SELECT release_version FROM system.local)
at consistency C (default ONE); `-` reads the queries from stdin, one a line (so
that a password in a statement stays off the command line). Prints rows
tab-separated (text/varchar as text, ints as numbers, inet as an address, uuid in
its usual form, other types as hex), 'OK' for void results, the change for schema
changes. Exits 0 on success, 1 on connection/protocol/TLS/CQL error (message on
stderr).

--cafile speaks TLS, verifying the server's certificate against CA and its name
(or IP address) against --host. --user and --password-file (the password is the
file's first line) answer a server that asks for authentication with SASL PLAIN,
as PasswordAuthenticator expects. No paging: for the dev/CI nodes only.
"""
import argparse
import ipaddress
import socket
import ssl
import struct
import sys
import uuid

OP_ERROR, OP_STARTUP, OP_READY, OP_AUTHENTICATE, OP_QUERY, OP_RESULT = 0x00, 0x01, 0x02, 0x03, 0x07, 0x08
OP_AUTH_CHALLENGE, OP_AUTH_RESPONSE, OP_AUTH_SUCCESS = 0x0E, 0x0F, 0x10

# Protocol v4 consistency codes, by the names cqlsh uses.
CONSISTENCY = {"ANY": 0x0000, "ONE": 0x0001, "TWO": 0x0002, "THREE": 0x0003, "QUORUM": 0x0004,
               "ALL": 0x0005, "LOCAL_QUORUM": 0x0006, "EACH_QUORUM": 0x0007, "LOCAL_ONE": 0x000A}


class CqlError(Exception):
    pass


def _string(s):
    b = s.encode()
    return struct.pack(">H", len(b)) + b


class Reader:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, n):
        if self.pos + n > len(self.buf):
            raise CqlError("truncated frame body")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def short(self):
        return struct.unpack(">H", self.take(2))[0]

    def int(self):
        return struct.unpack(">i", self.take(4))[0]

    def string(self):
        return self.take(self.short()).decode("utf-8", "replace")

    def bytes(self):
        n = self.int()
        return None if n < 0 else self.take(n)

    def option(self):
        """Read a type [option]; return its id (nested options are skipped)."""
        tid = self.short()
        if tid == 0x0000:                      # custom
            self.string()
        elif tid in (0x0020, 0x0022):          # list, set
            self.option()
        elif tid == 0x0021:                    # map
            self.option()
            self.option()
        elif tid == 0x0030:                    # UDT
            self.string()
            self.string()
            for _ in range(self.short()):
                self.string()
                self.option()
        elif tid == 0x0031:                    # tuple
            for _ in range(self.short()):
                self.option()
        return tid


def _decode(tid, raw):
    if raw is None:
        return "NULL"
    if tid in (0x0001, 0x000A, 0x000D):        # ascii, text, varchar
        return raw.decode("utf-8", "replace")
    if tid in (0x0002, 0x0009, 0x0013, 0x0014) and len(raw) in (1, 2, 4, 8):  # bigint,int,smallint,tinyint
        return str(int.from_bytes(raw, "big", signed=True))
    if tid == 0x0004 and len(raw) == 1:        # boolean
        return "true" if raw[0] else "false"
    if tid == 0x0010 and len(raw) in (4, 16):  # inet (system.peers)
        return str(ipaddress.ip_address(raw))
    if tid in (0x000C, 0x000F) and len(raw) == 16:  # uuid, timeuuid (host ids)
        return str(uuid.UUID(bytes=raw))
    return "0x" + raw.hex()


class Conn:
    def __init__(self, host, port, timeout, cafile=None):
        sock = socket.create_connection((host, port), timeout=timeout)
        if cafile:
            ctx = ssl.create_default_context(cafile=cafile)   # verifies the chain and the name
            try:
                sock = ctx.wrap_socket(sock, server_hostname=host)
            except BaseException:
                sock.close()
                raise
        self.sock = sock
        self.stream = 0

    def _recv_exact(self, n):
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise CqlError("connection closed by server")
            out += chunk
        return bytes(out)

    def request(self, opcode, body):
        self.stream = (self.stream + 1) % 32768
        self.sock.sendall(struct.pack(">BBhBi", 0x04, 0, self.stream, opcode, len(body)) + body)
        while True:
            version, _flags, stream, op, length = struct.unpack(">BBhBi", self._recv_exact(9))
            body = self._recv_exact(length)
            if stream == self.stream:
                break                           # skip events / other streams
        if version & 0x7F != 0x04:
            raise CqlError("unexpected protocol version 0x%02x" % version)
        r = Reader(body)
        if op == OP_ERROR:
            code = r.int()
            raise CqlError("server error 0x%04x: %s" % (code, r.string()))
        return op, r

    def startup(self, user=None, password=None):
        body = struct.pack(">H", 1) + _string("CQL_VERSION") + _string("3.0.0")
        op, r = self.request(OP_STARTUP, body)
        if op == OP_AUTHENTICATE:
            authenticator = r.string()
            if user is None:
                raise CqlError("server requires authentication (%s): pass --user and --password-file"
                               % authenticator)
            # SASL PLAIN: authorization id (empty), user, password, NUL-separated.
            token = b"\0" + user.encode() + b"\0" + password.encode()
            op, r = self.request(OP_AUTH_RESPONSE, struct.pack(">i", len(token)) + token)
            if op == OP_AUTH_CHALLENGE:
                raise CqlError("server sent a SASL challenge after PLAIN credentials (%s)" % authenticator)
            if op != OP_AUTH_SUCCESS:
                raise CqlError("unexpected reply to AUTH_RESPONSE: opcode 0x%02x" % op)
        elif op != OP_READY:
            raise CqlError("unexpected reply to STARTUP: opcode 0x%02x" % op)

    def query(self, cql, consistency=CONSISTENCY["ONE"]):
        q = cql.encode()
        body = struct.pack(">i", len(q)) + q + struct.pack(">HB", consistency, 0)
        op, r = self.request(OP_QUERY, body)
        if op != OP_RESULT:
            raise CqlError("unexpected reply to QUERY: opcode 0x%02x" % op)
        kind = r.int()
        if kind == 0x0001:
            return ["OK"]
        if kind == 0x0003:
            return ["USE " + r.string()]
        if kind == 0x0005:
            change, target = r.string(), r.string()
            names = [r.string()]
            if target != "KEYSPACE":
                names.append(r.string())
            return ["SCHEMA_CHANGE %s %s %s" % (change, target, ".".join(names))]
        if kind != 0x0002:
            return ["RESULT kind %d" % kind]
        flags, ncols = r.int(), r.int()
        if flags & 0x0002:                      # has_more_pages
            r.bytes()
        if flags & 0x0004:                      # no_metadata
            raise CqlError("no_metadata rows not supported")
        if flags & 0x0001:                      # global_tables_spec
            r.string()
            r.string()
        types = []
        for _ in range(ncols):
            if not flags & 0x0001:
                r.string()
                r.string()
            r.string()                          # column name
            types.append(r.option())
        return ["\t".join(_decode(t, r.bytes()) for t in types) for _ in range(r.int())]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9042)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--consistency", default="ONE", type=str.upper, choices=sorted(CONSISTENCY),
                    help="e.g. ALL to fail while the coordinator believes a replica is down")
    ap.add_argument("--quiet", action="store_true", help="print nothing on success")
    ap.add_argument("--cafile", help="speak TLS, verifying the server against this CA (PEM)")
    ap.add_argument("--user", help="log in as USER (SASL PLAIN) if the server asks")
    ap.add_argument("--password-file", help="USER's password: the file's first line")
    ap.add_argument("queries", nargs="*", default=["SELECT release_version FROM system.local"],
                    help="CQL statements; - reads them from stdin, one a line")
    a = ap.parse_args()
    if (a.user is None) != (a.password_file is None):
        ap.error("--user and --password-file go together")
    queries = a.queries
    if queries == ["-"]:
        queries = [line.strip() for line in sys.stdin if line.strip()]
    try:
        password = None
        if a.password_file:
            with open(a.password_file, encoding="utf-8") as f:
                password = f.readline().rstrip("\r\n")
        c = Conn(a.host, a.port, a.timeout, a.cafile)
        try:
            c.startup(a.user, password)
            for q in queries:
                for line in c.query(q, CONSISTENCY[a.consistency]):
                    if not a.quiet:
                        print(line)
        finally:
            c.sock.close()
    except (OSError, CqlError, struct.error) as e:   # ssl.SSLError is an OSError
        print("cql_ping: %s:%d: %s" % (a.host, a.port, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
