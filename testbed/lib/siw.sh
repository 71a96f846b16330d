# testbed/lib/siw.sh: helpers of testbed/siw-interop (sourced, bash).
#
# siw_check_capture PCAP [KEY=VALUE ...] checks one capture with tshark (and, with inspect=DP,
# with `DP inspect --json`) and prints one line: "ok: <summary>" or the first problem found.
# Segments that the bridge handed to tcpdump after the ACK that answers them are first put
# back in causal order (counted in the summary). Returns 0 when every check passed. Keys:
#   conns=N       exactly N MPA Request/Reply exchanges (default: at least 1)
#   rev=1|2       MPA revision of every Request and Reply
#   enhanced=0|1  RFC 6581 H bit (shown by tshark 4.0 as Res 0x10) on every Request/Reply
#   crc=0|1       C bit of every Reply; with 1 every FPDU must show "Good CRC32"
#   markers=0|1   M bit of every Reply; with 1 tshark must find markers
#   pd_req=HEX    private data of every Request (e.g. 00010001); pd_rep=HEX for Replies
#   p2p=0|1       RFC 6581 P2P bit (IRD bit 15) of every Request and Reply
#   min_fpdus=N   at least N FPDUs decoded by tshark
#   opcodes=LIST  comma list of RDMAP opcodes (hex) that must all appear, e.g. 0x3,0x1,0x2
#   inspect=BIN   also decode with `BIN inspect --json`: no errors, the same MPA bits, the same
#                 FPDU sequence (sender and opcode, per connection) as tshark, CRC verdicts
#                 that agree with tshark's

SIW_CHECK_PY=$(cat <<'PY'
import json, subprocess, sys
from collections import defaultdict

pcap = sys.argv[1]
want = dict(a.split("=", 1) for a in sys.argv[2:])

def fail(msg):
    print(msg)
    sys.exit(1)

def tshark(*args):
    r = subprocess.run(["tshark", "-n", "-r", pcap, "--disable-heuristic", "rpcrdma_iwarp", *args],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail("tshark failed: " + r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "tshark failed")
    return r.stdout

def fields(filt, *names):
    out = tshark("-Y", filt, "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=;",
                 *sum([["-e", n] for n in names], []))
    return [l.split("\t") for l in out.splitlines() if l.strip()]

def endpoints(filt, *names):
    """fields() whose columns "src" and "dst" are the frame's IPv4 or IPv6 address (IPv6 in
    brackets, as the project's decoder writes it before a port)."""
    names = [{"src": "ip.src", "dst": "ip.dst"}.get(n, n) for n in names]
    rows = fields(filt, *names, "ipv6.src", "ipv6.dst")
    for r in rows:
        r += [""] * (len(names) + 2 - len(r))
        for i, n in enumerate(names):
            if n in ("ip.src", "ip.dst") and not r[i]:
                v6 = r[len(names) + (0 if n == "ip.src" else 1)]
                r[i] = "[%s]" % v6 if v6 else ""
        del r[len(names):]
    return rows

# 0. The capture in causal order. tcpdump listens on the bridge, which hands a frame to the
# port it forwards to before it hands the bridge's own copy to tcpdump: on a busy host the
# receiver can answer, and its ACK reach tcpdump, before the copy of the segment it
# acknowledges does. tshark then flags the ACK as acknowledging an unseen segment and the
# segment as a spurious retransmission, and does not decode its FPDUs. Such a segment (one a
# frame before it already acknowledges, within the next REORDER_WINDOW frames) is put back
# before that ACK; a segment the capture really lost has nothing to put back and still fails.
REORDER_WINDOW = 64
MASK = 0xFFFFFFFF

def before(a, b):
    """TCP sequence number a is before b (RFC 793 serial arithmetic)."""
    return a != b and ((b - a) & MASK) < 0x80000000

def causal_order(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] not in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        return path, 0      # not a little-endian classic pcap (tcpdump writes those here)
    recs, off = [], 24
    while off + 16 <= len(data):
        incl = int.from_bytes(data[off + 8:off + 12], "little")
        recs.append(data[off:off + 16 + incl])
        off += 16 + incl
    seg = {}    # frame number -> (direction, seq, end of sequence space, ack or None)
    on = lambda v: v in ("1", "True")
    for n, src, sp, dst, dp, seq, ln, ack, fa, fs, ff in endpoints(
            "tcp", "frame.number", "src", "tcp.srcport", "dst", "tcp.dstport", "tcp.seq_raw",
            "tcp.len", "tcp.ack_raw", "tcp.flags.ack", "tcp.flags.syn", "tcp.flags.fin"):
        end = (int(seq) + int(ln or 0) + on(fs) + on(ff)) & MASK
        seg[int(n)] = (("%s:%s" % (src, sp), "%s:%s" % (dst, dp)), int(seq), end,
                       int(ack) if on(fa) else None)
    sent = {}   # direction -> end of the furthest sequence space put out so far
    order, done, moved = [], set(), [0]

    def put(i):
        done.add(i)
        s = seg.get(i)
        if s and s[3] is not None:
            back = (s[0][1], s[0][0])
            for j in range(i + 1, min(i + 1 + REORDER_WINDOW, len(recs) + 1)):
                if back not in sent or not before(sent[back], s[3]):
                    break
                t = seg.get(j)
                if j not in done and t and t[0] == back and before(t[1], s[3]) \
                        and before(sent[back], t[2]):
                    put(j)
                    moved[0] += 1
        order.append(i)
        if s and (s[0] not in sent or before(sent[s[0]], s[2])):
            sent[s[0]] = s[2]

    for i in range(1, len(recs) + 1):
        if i not in done:
            put(i)
    if not moved[0]:
        return path, 0
    fixed = path.rsplit(".pcap", 1)[0] + ".causal.pcap"
    with open(fixed, "wb") as f:
        f.write(data[:24] + b"".join(recs[i - 1] for i in order))
    return fixed, moved[0]

pcap, reordered = causal_order(pcap)

# 1. No malformed frames at all (any protocol).
bad = fields("_ws.malformed", "frame.number")
if bad:
    fail("tshark: %d malformed frame(s), first frame %s" % (len(bad), bad[0][0]))

# 2. MPA Request/Reply bits.
mpa = endpoints("iwarp_mpa.req || iwarp_mpa.rep", "frame.number", "src", "tcp.srcport", "dst",
             "tcp.dstport", "iwarp_mpa.req", "iwarp_mpa.marker_flag", "iwarp_mpa.crc_flag",
             "iwarp_mpa.rej_flag", "iwarp_mpa.res", "iwarp_mpa.rev", "iwarp_mpa.privatedata")
reqs = [m for m in mpa if m[5]]
reps = [m for m in mpa if not m[5]]
if not reqs or not reps:
    fail("tshark: no MPA %s in the capture" % ("Request" if not reqs else "Reply"))
if "conns" in want and (len(reqs) != int(want["conns"]) or len(reps) != int(want["conns"])):
    # What the capture holds, so that a failure in CI can be read without it: the
    # connections opened (SYNs) and the MPA frames tshark decoded.
    syns = fields("tcp.flags.syn == 1 && tcp.flags.ack == 0", "frame.number", "tcp.srcport",
                  "tcp.dstport")
    fail("tshark: %d MPA Request(s) and %d Reply(ies), expected %s each (SYNs: %s; MPA: %s)"
         % (len(reqs), len(reps), want["conns"],
            ", ".join("frame %s %s->%s" % tuple(r[:3]) for r in syns) or "none",
            ", ".join("frame %s %s %s->%s" % (m[0], "Request" if m[5] else "Reply", m[2], m[4])
                      for m in mpa)))
for m in mpa:
    kind = "Request" if m[5] else "Reply"
    where = "frame %s MPA %s %s:%s->%s:%s" % (m[0], kind, m[1], m[2], m[3], m[4])
    if m[8] not in ("0", "False"):
        fail("%s: Reject bit set" % where)
    if "rev" in want and m[10] != want["rev"]:
        fail("%s: revision %s, expected %s" % (where, m[10], want["rev"]))
    if "enhanced" in want:
        h = int(m[9] or "0", 16) & 0x10 != 0
        if h != (want["enhanced"] == "1"):
            fail("%s: H (enhanced) bit %d, expected %s" % (where, h, want["enhanced"]))
    bit = lambda v: "1" if v in ("1", "True") else "0"
    if kind == "Reply" and "crc" in want and bit(m[7]) != want["crc"]:
        fail("%s: C bit %s, expected %s" % (where, bit(m[7]), want["crc"]))
    if kind == "Reply" and "markers" in want and bit(m[6]) != want["markers"]:
        fail("%s: M bit %s, expected %s" % (where, bit(m[6]), want["markers"]))
    if "p2p" in want:
        pd = m[11].replace(":", "")
        p2p = len(pd) >= 4 and int(pd[:4], 16) & 0x8000 != 0
        if p2p != (want["p2p"] == "1"):
            fail("%s: P2P bit %d in private data '%s', expected %s" % (where, p2p, pd, want["p2p"]))
    key = "pd_req" if kind == "Request" else "pd_rep"
    if key in want and m[11].replace(":", "") != want[key]:
        fail("%s: private data '%s', expected %s" % (where, m[11], want[key]))

# 3. FPDUs: every one decoded, opcodes, CRC verdicts.
fp = endpoints("iwarp_ddp_rdmap", "frame.number", "src", "tcp.srcport", "dst", "tcp.dstport",
            "iwarp_rdma.opcode", "tcp.seq_raw")
seq = defaultdict(list)   # connection (sorted endpoints) -> [(sender, opcode)]
decoded = set()           # frames in which tshark decoded an FPDU
n_fpdus = 0
ops = set()
starts = set()            # (sender, TCP sequence) of every frame decoded so far
for f in fp:
    a, b = "%s:%s" % (f[1], f[2]), "%s:%s" % (f[3], f[4])
    # A retransmitted segment that was captured before is decoded again by tshark; the
    # stream carries its FPDUs once.
    if (a, f[6]) in starts:
        continue
    starts.add((a, f[6]))
    decoded.add(int(f[0]))
    for op in f[5].split(";"):
        if not op:
            continue
        op = int(op, 16)
        ops.add(op)
        seq[tuple(sorted((a, b)))].append((a, op))
        n_fpdus += 1
if "min_fpdus" in want and n_fpdus < int(want["min_fpdus"]):
    # A segment the capture missed (the bridge's copy lost, not the wire's frame) shows as
    # an ACK of an unseen segment, and its sender's retransmission is not decoded again.
    unseen = fields("tcp.analysis.ack_lost_segment", "frame.number")
    fail("tshark: %d FPDUs decoded, expected at least %s%s"
         % (n_fpdus, want["min_fpdus"],
            "; capture incomplete: %d ACK(s) of segments it never saw, first frame %s"
            % (len(unseen), unseen[0][0]) if unseen else ""))
for op in filter(None, want.get("opcodes", "").split(",")):
    if int(op, 16) not in ops:
        fail("tshark: no FPDU with RDMAP opcode %s (seen: %s)"
             % (op, ",".join("0x%x" % o for o in sorted(ops))))
text = tshark("-Y", "iwarp_mpa", "-V")
good = text.count("(Good CRC32)")
badc = text.count("Bad CRC32")
n_ulpdu = sum(1 for l in text.splitlines() if l.strip().startswith("ULPDU length:"))
if badc:
    fail("tshark: %d FPDU(s) with Bad CRC32" % badc)
if want.get("crc") == "1" and good != n_ulpdu:
    fail("tshark: %d of %d FPDUs show Good CRC32" % (good, n_ulpdu))
if want.get("crc") == "0" and good:
    fail("tshark: %d CRCs checked although CRC was not negotiated" % good)
n_markers = sum(1 for l in text.splitlines() if l.strip().startswith("Marker"))
if want.get("markers") == "1" and n_markers == 0:
    fail("tshark: markers negotiated but no marker decoded")
summary = "%d MPA exchange(s) rev %s, %d FPDUs (%s), CRC %s%s" % (
    len(reqs), reqs[0][10], n_fpdus, ",".join("0x%x" % o for o in sorted(ops)),
    "good %d/%d" % (good, n_ulpdu) if good else "off",
    ", %d markers" % n_markers if n_markers else "")

# 4. The project's own decoder must see the same.
if "inspect" in want:
    r = subprocess.run([want["inspect"], "inspect", "--json", pcap], capture_output=True, text=True)
    try:
        rep = json.loads(r.stdout)
    except ValueError:
        fail("dataplane inspect: exit %d, no JSON: %s" % (r.returncode, r.stderr.strip()[-300:]))
    if rep["errors"] or r.returncode != 0:
        fail("dataplane inspect: %s" % "; ".join(rep["errors"][:3] or [r.stderr.strip()]))
    if len(rep["mpa"]) != len(mpa):
        fail("dataplane inspect: %d MPA frames, tshark %d" % (len(rep["mpa"]), len(mpa)))
    for m, t in zip(sorted(rep["mpa"], key=lambda m: m["frame"]), mpa):
        if (str(m["revision"]), int(m["crc"]), int(m["markers"])) != \
           (t[10], int(t[7] in ("1", "True")), int(t[6] in ("1", "True"))):
            fail("dataplane inspect: frame %s MPA rev/C/M %s/%d/%d, tshark %s/%s/%s"
                 % (m["frame"], m["revision"], m["crc"], m["markers"], t[10], t[7], t[6]))
        if "ird" in m and t[11]:
            pd = "%04x%04x" % ((m["ird"] | (0x8000 if m["p2p"] else 0)),
                               m["ord"] | (0x8000 if "write" in m["rtr"] else 0)
                               | (0x4000 if "read" in m["rtr"] else 0))
            if not t[11].replace(":", "").startswith(pd):
                fail("dataplane inspect: frame %s IRD/ORD %s, tshark private data %s"
                     % (m["frame"], pd, t[11]))
    # tshark's MPA dissector is heuristic and works segment by segment: it cannot decode
    # an FPDU that a retransmission carries at another offset than the original did (the
    # original never reached the bridge). The project's decoder reassembles the stream;
    # such FPDUs are excused, counted, and only in frames tshark itself flags as
    # retransmitted or out of order.
    resent = {int(r[0]) for r in fields(
        "tcp.analysis.retransmission || tcp.analysis.fast_retransmission || "
        "tcp.analysis.out_of_order || tcp.analysis.spurious_retransmission", "frame.number")}
    iseq = defaultdict(list)
    excused = 0
    for f in sorted(rep["fpdus"], key=lambda f: (f["frame"], f["seq"])):
        if f["frame"] in resent and f["frame"] not in decoded:
            excused += 1
            continue
        iseq[tuple(sorted((f["src"], f["dst"])))].append((f["src"], f["opcode"]))
    if set(iseq) != set(seq):
        fail("dataplane inspect: connections %s, tshark %s" % (sorted(iseq), sorted(seq)))
    for c in seq:
        if iseq[c] != seq[c]:
            i = next((i for i, (x, y) in enumerate(zip(iseq[c], seq[c])) if x != y),
                     min(len(iseq[c]), len(seq[c])))
            fail("dataplane inspect: %s FPDU #%d differs: inspect %s, tshark %s (of %d/%d)"
                 % (" <-> ".join(c), i, iseq[c][i:i + 1], seq[c][i:i + 1], len(iseq[c]),
                    len(seq[c])))
    s = rep["summary"]
    if want.get("crc") == "1" and s["crc_good"] != s["fpdus"]:
        fail("dataplane inspect: %d of %d CRCs good" % (s["crc_good"], s["fpdus"]))
    if s["crc_bad"]:
        fail("dataplane inspect: %d bad CRCs" % s["crc_bad"])
    summary += "; inspect agrees (%d FPDUs%s)" % (
        s["fpdus"], ", %d only in retransmissions tshark cannot decode" % excused if excused else "")
if reordered:
    summary += "; %d segment(s) put back before the ACK that preceded them in the capture" \
        % reordered
print("ok: " + summary)
PY
)

siw_check_capture() {
  python3 -c "$SIW_CHECK_PY" "$@"
}

# siw_check_ping PCAP MAC IP COUNT: the capture holds an ARP reply "IP is-at MAC" and COUNT
# ICMP echo replies from IP with source MAC, and nothing malformed.
siw_check_ping() {
  local pcap=$1 mac=$2 ip=$3 count=$4 n
  n=$(tshark -n -r "$pcap" -Y '_ws.malformed' 2>/dev/null | wc -l)
  [ "$n" = 0 ] || { echo "tshark: $n malformed frame(s)"; return 1; }
  n=$(tshark -n -r "$pcap" -Y "arp.opcode == 2 && arp.src.proto_ipv4 == $ip && arp.src.hw_mac == $mac && eth.src == $mac" 2>/dev/null | wc -l)
  [ "$n" -ge 1 ] || { echo "tshark: no ARP reply '$ip is-at $mac'"; return 1; }
  n=$(tshark -n -r "$pcap" -Y "icmp.type == 0 && ip.src == $ip && eth.src == $mac && icmp.resp_to" 2>/dev/null | wc -l)
  [ "$n" -ge "$count" ] || { echo "tshark: $n ICMP echo replies from $ip ($mac), expected $count"; return 1; }
  echo "ok: ARP reply and $n echo replies from $ip ($mac)"
}
