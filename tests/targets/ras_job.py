"""A stand-in for NCCL's RAS service (tests/functional/test_nccl.py): a process that listens
where NCCL's RAS thread would (NCCL_RAS_ADDR in its environment, else localhost:28028; with
SO_REUSEADDR and SO_REUSEPORT, as NCCL binds it) and speaks its client protocol as NCCL's
src/ras/client_support.cc does: "CLIENT PROTOCOL n" -> "SERVER PROTOCOL 2", "TIMEOUT s" -> "OK",
"SET FORMAT json|text" -> "OK", "STATUS" -> the report, then the connection closed.

RAS_MODE: json (the document in the file RAS_DOC, "{pid}" in it replaced by this pid), text (an
NCCL before 2.28.7: no JSON format, "ERROR: Unknown command ..."), flood (a report without end),
silent (never answers), mute (answers the handshake, never the status), junk (answers the
handshake with something else). RAS_LOG: a file each
connection's commands are appended to, one line each. Prints READY once listening."""
import os
import socket
import sys
import threading

MODE = os.environ.get('RAS_MODE', 'json')
LOG = os.environ.get('RAS_LOG')
ADDR = os.environ.get('NCCL_RAS_ADDR', 'localhost:28028')


def log(line):
    if LOG:
        with open(LOG, 'a') as f:
            f.write(line + '\n')


def report():
    if MODE == 'text':
        return ('NCCL version 2.23.4+cuda12.6\nCUDA runtime version 12060, driver version 12080\n\n'
                'Job summary\n===========\n').encode()
    with open(os.environ['RAS_DOC']) as f:
        return f.read().replace('{pid}', str(os.getpid())).encode()


def serve(conn):
    json_ok = False
    buf = b''
    with conn:
        while True:
            data = conn.recv(4096)
            if not data:
                return
            buf += data
            while b'\n' in buf:
                line, buf = buf.split(b'\n', 1)
                cmd = line.decode('ascii', 'replace').strip()
                log(cmd)
                up = cmd.upper()
                if MODE == 'silent' or (MODE == 'mute' and up in ('STATUS', 'VERBOSE STATUS')):
                    continue
                if MODE == 'junk':
                    conn.sendall(b'HTTP/1.1 400 Bad Request\r\n')
                elif up.startswith('CLIENT PROTOCOL '):
                    conn.sendall(b'SERVER PROTOCOL 2\n')
                elif up.startswith('TIMEOUT '):
                    conn.sendall(b'OK\n')
                elif up == 'SET FORMAT JSON' and MODE != 'text':
                    json_ok = True
                    conn.sendall(b'OK\n')
                elif up in ('STATUS', 'VERBOSE STATUS'):
                    if MODE == 'flood':
                        chunk = b'{"communicators": [' + b' ' * 65536
                        try:
                            while True:
                                conn.sendall(chunk)
                        except OSError:
                            return
                    conn.sendall(report() if json_ok or MODE == 'text' else b'text\n')
                    return
                else:
                    conn.sendall(('ERROR: Unknown command %s\n' % cmd).encode())


def main():
    host, port = ADDR.rsplit(':', 1)
    family = socket.AF_INET6 if host.startswith('[') else socket.AF_INET
    host = host.strip('[]')
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(('127.0.0.1' if host == 'localhost' else host, int(port)))
    s.listen(16)
    print('READY {}', flush=True)
    while True:
        conn, _ = s.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == '__main__':
    sys.exit(main())
