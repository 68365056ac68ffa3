"""A free local port for the benchmarks' servers and their two-process rows, so that two runs on one machine do not
collide. Standard library only: the GPU acceptance run imports it before it installs anything."""

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
