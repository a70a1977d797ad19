"""The program that runs first inside every code sandbox (`sandbox/__init__.py` starts it).

Reads the job (marshal, from the host) from an inherited fd,
sets the rlimits, compiles the program once, then runs each test case in a forked child:
stdin/stdout/stderr on pipes of its own (nothing else inherited), stdin/stdout programs as
__main__, function-call tasks as a module whose function's JSON result follows RESULT_MARK on
stdout. `exit()` and `quit()` are the builtins they are in an ordinary Python; a job's `prelude`
(the benchmark harness's imports) runs once before the cases, which start with its names. Between
cases every other process in the sandbox is killed. One line per case goes to
the runner's stdout: "exit timed_out overflow seconds cpu_seconds preempted stdout_b64
stderr_b64" (`preempted`: 1 when the case was switched out by the scheduler more often than it
gave the CPU up itself; the
CPU time of the case: its process and what it waited for (wait4), or, in a sandbox, every process
of the sandbox's PID namespace, so helpers it forked are its own). Only built-in
modules are imported here (json, re and friends would double the start-up time).
"""

RUNNER = r"""
import binascii, marshal, os, resource, select, sys, time
SIGKILL = 9  # the signal module imports enum and collections: 3-10 ms
opts = marshal.loads(binascii.a2b_hex(sys.argv[1]))
with open(opts["fd"], "rb") as f:
    job = marshal.loads(f.read())
for name, val in opts["rlimits"]:
    resource.setrlimit(getattr(resource, name), (val, val))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
out_fd = os.dup(1)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1):
    os.dup2(null, fd)
sys.argv = ["solution.py"]
deadline = time.monotonic() + opts["timeout_s"]
fn_name, mark = job["fn_name"], opts["mark"]

class Quitter:  # the `exit` and `quit` of an interactive Python (`-S` skips site, which adds them)
    def __init__(self, name):
        self.name = name
    def __repr__(self):
        return "Use " + self.name + "() to exit"
    def __call__(self, code=None):
        raise SystemExit(code)

import builtins
builtins.exit, builtins.quit = Quitter("exit"), Quitter("quit")
base = {}
if job.get("prelude"):  # the harness's own imports (typing for starter code), run once here
    exec(compile(job["prelude"], "harness.py", "exec"), base)
try:
    code, compile_error = compile(job.pop("code"), "solution.py", "exec"), None
except BaseException as e:
    code, compile_error = None, (type(e).__name__ + ": " + str(e) + "\n").encode()

def plain(o):
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=repr)
    if isinstance(o, (bytes, bytearray)):
        return o.decode("utf-8", "replace")
    return repr(o)

def child(case):
    ns = dict(base)
    ns.update({"__name__": "__main__" if fn_name is None else "solution",
               "__builtins__": __builtins__})
    exec(code, ns)
    if fn_name is None:
        return
    fn = ns.get(fn_name)
    if fn is None:  # a method of a class the program defines (LeetCode's Solution)
        for v in list(ns.values()):
            if isinstance(v, type) and v.__module__ == "solution" and hasattr(v, fn_name):
                fn = getattr(v(), fn_name)
                break
    if fn is None:
        raise SystemExit("no function " + repr(fn_name) + " in the program")
    out = fn(*case["args"])
    import json
    text = json.dumps(out, default=plain)
    sys.stdout.flush()
    sys.stdout.write(mark + text)

def run_child(case):
    status = 1
    try:
        try:
            child(case)
            status = 0
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                sys.stderr.write(str(e.code) + "\n")
        except BaseException:
            sys.excepthook(*sys.exc_info())
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(status & 255)

TICK = os.sysconf("SC_CLK_TCK")

def sandbox_cpu():
    # CPU seconds of every process of this sandbox (its own PID namespace) but this runner, with
    # what init reaped: a case's helpers count as the case's
    total, me = 0, os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open("/proc/" + name + "/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        own = int(fields[11]) + int(fields[12])
        total += (0 if name == "1" else own) + int(fields[13]) + int(fields[14])
    return total / TICK

def run_case(case):
    before = sandbox_cpu() if opts["isolated"] else 0.0
    pipes = [os.pipe() for _ in range(3)]
    pid = os.fork()
    if pid == 0:
        os.setsid()
        for i, (r, w) in enumerate(pipes):
            os.dup2(r if i == 0 else w, i)
        os.closerange(3, 1 << 16)
        run_child(case)
    for i, (r, w) in enumerate(pipes):
        os.close(r if i == 0 else w)  # the child's ends
    stdin_w, out_r, err_r = pipes[0][1], pipes[1][0], pipes[2][0]
    data = memoryview(case["stdin"])
    bufs = {out_r: bytearray(), err_r: bytearray()}
    caps = {out_r: case["stdout_cap"], err_r: opts["stderr_cap"]}
    poll = select.poll()
    open_fds = {out_r, err_r}
    for fd in (out_r, err_r):
        os.set_blocking(fd, False)
        poll.register(fd, select.POLLIN)
    if data:
        os.set_blocking(stdin_w, False)
        poll.register(stdin_w, select.POLLOUT)
        open_fds.add(stdin_w)
    else:
        os.close(stdin_w)
    pidfd = os.pidfd_open(pid)  # readable once the child exits (its daemons may hold the pipes)
    poll.register(pidfd, select.POLLIN)
    timed_out = overflow = exited = False
    t0 = time.monotonic()

    def take(fd):
        chunk = os.read(fd, 1 << 16)
        if chunk:
            buf = bufs[fd]
            room = caps[fd] - len(buf)
            buf += chunk[:max(room, 0)]
            return len(chunk) > room and fd == out_r
        poll.unregister(fd)
        open_fds.discard(fd)
        os.close(fd)
        return False

    while not (exited or overflow):
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        for fd, ev in poll.poll(min(left, 1.0) * 1000):
            if fd == pidfd:
                exited = True
            elif fd == stdin_w:
                try:
                    data = data[os.write(fd, data[:1 << 16]):]
                except OSError:
                    data = data[:0]
                if not data:
                    poll.unregister(fd)
                    open_fds.discard(fd)
                    os.close(fd)
            elif fd in open_fds:
                overflow = take(fd) or overflow
    if exited:  # what the child wrote before it exited is in the pipes: read it all
        for fd in (out_r, err_r):
            try:
                while fd in open_fds and not overflow:
                    overflow = take(fd) or overflow
            except BlockingIOError:
                pass
    for fd in open_fds | {pidfd}:
        os.close(fd)
    spent = sandbox_cpu() - before if opts["isolated"] else 0.0
    try:
        os.killpg(pid, SIGKILL)
    except OSError:
        pass
    if opts["isolated"]:  # every process of this sandbox but us and its init
        try:
            os.kill(-1, SIGKILL)
        except OSError:
            pass
    _, status, usage = os.wait4(pid, 0)
    return (os.waitstatus_to_exitcode(status), timed_out, overflow, time.monotonic() - t0,
            max(usage.ru_utime + usage.ru_stime, spent), int(usage.ru_nivcsw > usage.ru_nvcsw),
            bytes(bufs[out_r]), bytes(bufs[err_r]))

def b64(b):
    return binascii.b2a_base64(b, newline=False).decode()

for case in job["cases"]:
    if compile_error is not None:
        res = (1, False, False, 0.0, 0.0, 0, b"", compile_error)
    elif time.monotonic() >= deadline:
        break
    else:
        res = run_case(case)
    line = "%d %d %d %.6f %.6f %d %s %s\n" % (res[0], res[1], res[2], res[3], res[4], res[5],
                                             b64(res[6]), b64(res[7]))
    line = memoryview(line.encode())
    while line:
        line = line[os.write(out_fd, line):]
    if res[1]:
        break
"""
