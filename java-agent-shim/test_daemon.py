#!/usr/bin/env python3
"""Dev tool: a stand-in daemon for testing the JVMTI shim by hand (not used by the Rust code or CI).

It listens on a Unix socket, accepts one shim connection, decodes and validates every frame against
PROTOCOL.md, and prints a JSON summary. Typical use:

    python3 java-agent-shim/test_daemon.py --socket /tmp/jp.sock --seconds 5 &
    jcmd <pid> JVMTI.agent_load /abs/path/libjvmperf-shim.so /tmp/jp.sock

Checks: HELLO comes first, every method id a NMETHOD_LOAD references was announced by a METHOD earlier on
the connection, payloads are consumed exactly, REPLAY_DONE counts match the replayed records seen.
"""
import argparse
import json
import os
import socket
import struct
import sys
import time

KINDS = {1: "HELLO", 2: "METHOD", 3: "NMETHOD_LOAD", 4: "NMETHOD_UNLOAD", 5: "CODE_BLOB", 6: "THREAD_START",
         7: "THREAD_END", 8: "DROPPED", 9: "REPLAY_DONE", 10: "RETRANSFORM_DONE", 11: "STATS",
         12: "METHODS_FORGOTTEN", 13: "BUSY"}
STATS_FIELDS = ["total_bytes", "queue_capacity", "queue_used", "queue_high_water", "sent_method_ids",
                "sent_ids_bytes", "command_buffer_bytes", "write_buffer_bytes", "methods_forgotten"]
MAX_LEN = 16 << 20


class ProtocolError(Exception):
    pass


class Reader:
    def __init__(self, data):
        self.d, self.o = data, 0

    def take(self, n):
        if self.o + n > len(self.d):
            raise ProtocolError(f"payload too short: need {n} at {self.o} of {len(self.d)}")
        v = self.d[self.o:self.o + n]
        self.o += n
        return v

    def u8(self): return self.take(1)[0]
    def u32(self): return struct.unpack("<I", self.take(4))[0]
    def i32(self): return struct.unpack("<i", self.take(4))[0]
    def u64(self): return struct.unpack("<Q", self.take(8))[0]
    def str(self): return self.take(self.u32()).decode("utf-8", "replace")

    def done(self):
        if self.o != len(self.d):
            raise ProtocolError(f"{len(self.d) - self.o} trailing payload bytes")


def decode(kind, r):
    if kind == 1:
        rec = dict(protocol=r.u32(), pid=r.u32(), attach_count=r.u32(), shim_version=r.str(),
                   vm_version=r.str(), java_version=r.str(), vm_name=r.str())
    elif kind == 2:
        rec = dict(id=r.u64(), cls=r.str(), name=r.str(), sig=r.str(), src=r.str(), flags=r.u32(),
                   bytecode_len=r.i32())
        rec["lines"] = [(r.u32(), r.u32()) for _ in range(r.u32())]
    elif kind == 3:
        rec = dict(id=r.u64(), addr=r.u64(), size=r.u32(), replayed=r.u8())
        r.take(3)
        pcs = []
        for _ in range(r.u32()):
            pc = r.u64()
            pcs.append((pc, [(r.u64(), r.i32()) for _ in range(r.u32())]))
        rec["pcs"] = pcs
    elif kind == 4:
        rec = dict(id=r.u64(), addr=r.u64())
    elif kind == 5:
        rec = dict(addr=r.u64(), size=r.u32(), replayed=r.u8())
        r.take(3)
        rec["name"] = r.str()
    elif kind == 6:
        rec = dict(tid=r.u32(), name=r.str())
    elif kind == 7:
        rec = dict(tid=r.u32())
    elif kind == 8:
        rec = dict(records=r.u64(), bytes=r.u64())
    elif kind == 9:
        rec = dict(nmethods=r.u32(), code_blobs=r.u32())
    elif kind == 10:
        rec = dict(requested=r.u32(), retransformed=r.u32(), error=r.i32())
    elif kind == 11:
        rec = dict(version=r.u32(), **{f: r.u64() for f in STATS_FIELDS})
    elif kind == 12:
        rec = {}
    elif kind == 13:
        rec = dict(version=r.u32(), daemon_pid=r.u32())
    else:
        return None
    r.done()
    return rec


def frame(kind, payload):
    return struct.pack("<IHHQ", 12 + len(payload), kind, 0, time.monotonic_ns()) + payload


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--seconds", type=float, default=5.0, help="stay connected this long after REPLAY_DONE")
    ap.add_argument("--retransform", help="after the replay, RETRANSFORM methods whose class+name contains this")
    ap.add_argument("--bad-retransform", action="store_true", help="also send ids the shim never announced")
    ap.add_argument("--stall", type=float, default=0.0, help="stop reading for this long after REPLAY_DONE")
    ap.add_argument("--headers-only", action="store_true",
                    help="decode only frame headers and REPLAY_DONE (to time the shim, not this script)")
    ap.add_argument("--junk", choices=["ok", "truncated", "badlen"],
                    help="after the replay send frames the shim must skip/refuse (ok), or a truncated "
                         "RETRANSFORM / a len < 12 header, after which the shim must close the connection")
    ap.add_argument("--forget-every", type=float, default=0.0,
                    help="after the replay, send FORGET_METHODS this often (seconds)")
    ap.add_argument("--accept-timeout", type=float, default=30.0)
    args = ap.parse_args()

    if os.path.exists(args.socket):
        os.unlink(args.socket)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(args.socket)
    srv.listen(1)
    srv.settimeout(args.accept_timeout)
    print(f"listening on {args.socket}", file=sys.stderr, flush=True)
    conn, _ = srv.accept()
    t_accept = time.monotonic()
    conn.settimeout(0.2)

    counts, replayed = {}, {3: 0, 5: 0}
    methods, errors = {}, []
    announced = set()  # method ids sent since the latest METHODS_FORGOTTEN
    next_forget = None
    hello = replay_done = None
    t_replay_done = None
    first_time = last_replay_time = None
    samples = dict(inline=None, blobs=set(), threads=[], unload=None, dropped=None, retransform_done=None)
    max_depth, inline_nms, buf, deadline, sent_rt = 0, 0, b"", None, False
    n_frames = n_bytes = 0
    stalled, t_retransform, after_rt = False, None, dict(loads=0, unloads=0, loads_any=0)

    while True:
        if deadline and time.monotonic() > deadline:
            break
        try:
            if replay_done and args.junk and not samples.get("junk_sent"):
                samples["junk_sent"] = args.junk
                if args.junk == "ok":
                    conn.sendall(frame(4242, b"\xab" * (1 << 20)) + frame(7, b"") +
                                 frame(100, struct.pack("<I", 70000) + b"\0" * 8 * 70000) +
                                 frame(100, struct.pack("<I", 1) + struct.pack("<Q", 0x1234) + b"extra"))
                elif args.junk == "truncated":
                    conn.sendall(frame(100, struct.pack("<I", 10) + b"\0" * 8))
                else:
                    conn.sendall(struct.pack("<IHHQ", 8, 100, 0, 0))
            if replay_done and args.retransform and not sent_rt:
                ids = [m["id"] for m in methods.values() if args.retransform in m["cls"] + "." + m["name"]]
                if args.bad_retransform:
                    ids += [0xdeadbeef, 8]
                sent_rt = True
                samples["retransform_sent"] = len(ids)
                conn.sendall(frame(100, struct.pack("<I", len(ids)) + b"".join(struct.pack("<Q", i) for i in ids)))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the shim closed the connection; recv below sees it
        try:
            if replay_done and args.forget_every and time.monotonic() >= (next_forget or 0):
                next_forget = time.monotonic() + args.forget_every
                conn.sendall(frame(101, b""))
        except (BrokenPipeError, ConnectionResetError):
            pass
        if replay_done and args.stall and not stalled:
            stalled = True
            time.sleep(args.stall)
            deadline = time.monotonic() + args.seconds
        try:
            chunk = conn.recv(1 << 20)
        except socket.timeout:
            continue
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            print("shim closed the connection", file=sys.stderr)
            samples["closed_by_shim"] = True
            break
        buf += chunk
        while len(buf) >= 16:
            ln, kind, flags, ts = struct.unpack_from("<IHHQ", buf)
            if not 12 <= ln <= MAX_LEN or flags != 0:
                raise ProtocolError(f"bad header len={ln} flags={flags}")
            if len(buf) < 4 + ln:
                break
            payload, buf = buf[16:4 + ln], buf[4 + ln:]
            n_frames += 1
            n_bytes += 4 + ln
            if args.headers_only and kind != 9:
                counts[KINDS.get(kind, kind)] = counts.get(KINDS.get(kind, kind), 0) + 1
                first_time = first_time or ts
                if kind in (3, 5) and payload[20 if kind == 3 else 12]:
                    replayed[kind] += 1
                continue
            rec = decode(kind, Reader(payload))
            name = KINDS.get(kind, f"unknown{kind}")
            counts[name] = counts.get(name, 0) + 1
            first_time = first_time or ts
            if n_frames == 1 and kind != 1:
                errors.append("first frame is not HELLO")
            if kind == 1:
                hello = rec
            elif kind == 2:
                if rec["id"] in announced:
                    errors.append(f"duplicate METHOD {rec['id']:#x}")
                methods[rec["id"]] = rec
                announced.add(rec["id"])
            elif kind == 3:
                refs = {rec["id"]} | {m for _, fr in rec["pcs"] for m, _ in fr if m}
                missing = [m for m in refs if m not in announced]
                if missing:
                    errors.append(f"NMETHOD_LOAD {rec['id']:#x} references unannounced {missing[:3]}")
                depth = max((len(fr) for _, fr in rec["pcs"]), default=0)
                if depth > 1:
                    inline_nms += 1
                if depth > max_depth:
                    max_depth = depth
                    samples["inline"] = rec
                if rec["replayed"]:
                    replayed[3] += 1
                    last_replay_time = ts
            elif kind == 4:
                samples["unload"] = samples["unload"] or rec
            elif kind == 5:
                samples["blobs"].add(rec["name"])
                if rec["replayed"]:
                    replayed[5] += 1
                    last_replay_time = ts
            elif kind == 6:
                samples["threads"].append(rec)
            elif kind == 8:
                samples["dropped"] = rec
            elif kind == 9:
                replay_done = rec
                t_replay_done = time.monotonic()
                deadline = t_replay_done + args.seconds
                if (rec["nmethods"], rec["code_blobs"]) != (replayed[3], replayed[5]):
                    errors.append(f"REPLAY_DONE {rec} but saw {replayed}")
                replay_shim_ms = (ts - first_time) / 1e6
            elif kind == 11:
                samples["stats"] = rec
            elif kind == 12:
                announced.clear()
            elif kind == 10:
                samples["retransform_done"] = rec
                samples.setdefault("rt_all", []).append(rec)
                t_retransform = ts
            if t_retransform and kind in (3, 4) and ts > t_retransform:
                cls = methods.get(rec["id"], {}).get("cls")
                if args.retransform and cls and cls in args.retransform:
                    after_rt["loads" if kind == 3 else "unloads"] += 1

    def mname(mid):
        m = methods.get(mid)
        return f"{m['cls']}.{m['name']}{m['sig']}" if m else f"?{mid:#x}"

    inline = samples["inline"]
    out = dict(
        hello=hello, counts=counts, frames=n_frames, bytes=n_bytes, replay_done=replay_done,
        replay_ms_shim_clock=replay_done and round(replay_shim_ms, 1),
        replay_ms_wall_from_accept=t_replay_done and round((t_replay_done - t_accept) * 1e3, 1),
        nmethods_with_inlining=inline_nms, max_inline_depth=max_depth,
        deepest_inline_sample=inline and dict(
            root=mname(inline["id"]), size=inline["size"], n_pcs=len(inline["pcs"]),
            deepest_pc=[(mname(m), bci) for m, bci in max(inline["pcs"], key=lambda p: len(p[1]))[1]]),
        code_blob_names_sample=sorted(samples["blobs"])[:12], n_code_blob_names=len(samples["blobs"]),
        interpreter_blob="Interpreter" in samples["blobs"],
        threads_started=samples["threads"][:10], first_unload=samples["unload"] and dict(
            method=mname(samples["unload"]["id"]), addr=hex(samples["unload"]["addr"])),
        dropped=samples["dropped"], last_stats=samples.get("stats"), retransform_sent=samples.get("retransform_sent"),
        closed_by_shim=samples.get("closed_by_shim", False),
        retransform_done=samples["retransform_done"], all_retransform_done=samples.get("rt_all"),
        after_retransform_same_class=after_rt if t_retransform else None, errors=errors[:20], n_errors=len(errors))
    sample_method = next((m for m in methods.values() if m["lines"] and m["src"]), None)
    out["method_sample"] = sample_method and {k: v for k, v in sample_method.items() if k != "lines"} | {
        "n_lines": len(sample_method["lines"]), "first_lines": sample_method["lines"][:3]}
    print(json.dumps(out, indent=1, default=str))
    conn.close()
    srv.close()
    os.unlink(args.socket)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
