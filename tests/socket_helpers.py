"""Listening sockets that count the connections reaching them (for isolation tests)."""

import contextlib
import threading


@contextlib.contextmanager
def counting(servers):
  """Accepts and counts connections on listening `servers` in a thread; yields the list that
  gets one entry per connection."""
  hits, stop = [], threading.Event()
  for srv in servers:
    srv.settimeout(0.1)

  def accept():
    while not stop.is_set():
      for srv in servers:
        try:
          conn, _ = srv.accept()
          hits.append(1)
          conn.close()
        except OSError:
          pass

  t = threading.Thread(target=accept, daemon=True)
  t.start()
  try:
    yield hits
  finally:
    stop.set()
    t.join()
