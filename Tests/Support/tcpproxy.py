#!/usr/bin/env python3
"""A TCP forwarder for tests: tcpproxy.py LISTEN_PORT TARGET_PORT [MARKER NOTE_FILE] forwards
every connection on 127.0.0.1:LISTEN_PORT to 127.0.0.1:TARGET_PORT until killed. Killing it makes
the target unreachable (connections refused); starting it again on the same port brings it back.
With MARKER, the first time MARKER passes from client to server it is replaced by as many X's
(a body damaged in flight) and a line "corrupted" is appended to NOTE_FILE."""
import socket
import sys
import threading


corrupt = {"marker": None, "note": None, "done": False}
lock = threading.Lock()


def damage(data):
    marker = corrupt["marker"]
    if marker is None or marker not in data:
        return data
    with lock:
        if corrupt["done"]:
            return data
        corrupt["done"] = True
        with open(corrupt["note"], "a") as f:
            f.write("corrupted\n")
    return data.replace(marker, b"X" * len(marker), 1)


def pipe(src, dst, upstream):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(damage(data) if upstream else data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    listen_port, target_port = int(sys.argv[1]), int(sys.argv[2])
    if len(sys.argv) > 4:
        corrupt["marker"], corrupt["note"] = sys.argv[3].encode(), sys.argv[4]
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", listen_port))
    server.listen(128)
    print("listening", flush=True)
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.create_connection(("127.0.0.1", target_port))
        except OSError:
            client.close()
            continue
        for a, b, up in ((client, upstream, True), (upstream, client, False)):
            a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=pipe, args=(a, b, up), daemon=True).start()


if __name__ == "__main__":
    main()
