-- Wireshark dissector for TCPLS (docs/PROTOCOL.md), the records inside TLS 1.3.
--
-- TCPLS records are ordinary TLS 1.3 application-data records, so Wireshark's TLS dissector
-- decrypts them with a key log (NSS format, `tls.keylog_file`) and hands each record's content to
-- the dissector registered for the negotiated ALPN id, `tcpls/1`. This plugin parses that content
-- the way the spec says (§2.3, §7): from its last byte towards its first, one frame at a time,
-- then shows the frames in wire order.
--
-- Usage:
--   tshark -o tls.keylog_file:keys.log -X lua_script:tools/wireshark/tcpls.lua -r capture.pcap -V
--   wireshark -o tls.keylog_file:keys.log -X lua_script:tools/wireshark/tcpls.lua capture.pcap
-- or copy the file into the personal Lua plugins folder (Help > About Wireshark > Folders).
--
-- Beyond the wire fields it derives, per record: the Connection ID of the TCP connection (0 for a
-- session's first connection; for a joined one, the sequence number of the New Token whose token
-- its Join spends), which side sent it, the session it belongs to, and whether its stream bytes
-- were already seen on some connection of the session (a retransmission after a failover).
-- Join tokens are shown redacted (first 4 of 32 bytes): they are credentials of a live session.

local tcpls = Proto("tcpls", "TCPLS")

local FRAME_NAMES = {
    [0x00] = "Padding", [0x01] = "Ping", [0x02] = "Stream", [0x03] = "Stream (FIN)", [0x04] = "ACK",
    [0x05] = "New Token", [0x06] = "Connection Reset", [0x07] = "New Address", [0x08] = "Remove Address",
    [0x09] = "Stream Change", [0x10] = "Join", [0x11] = "Stream Reset", [0x12] = "Max Stream Data",
    [0x13] = "User Timeout", [0x14] = "RTT Probe", [0x15] = "RTT Echo", [0x16] = "TCP Info Request",
    [0x17] = "TCP Info", [0x18] = "Address Probe", [0x19] = "Address Echo", [0x1A] = "Rate Limit",
    [0x1B] = "Congestion Control", [0x1C] = "Stream Steer", [0x1D] = "Path Priority",
    [0x1E] = "Rejoin",
}

local RESET_CODES = { [0] = "application abort", [1] = "refused (stream limit)", [2] = "tunnel: TCP reset" }

local f = tcpls.fields
local function field(kind, abbr, name, ...)
    local pf = ProtoField[kind]("tcpls." .. abbr, name, ...)
    f[abbr] = pf
    return pf
end

-- Per record (generated from the session's state, not on the wire).
field("uint32", "conn_id", "Connection ID of this TCP connection")
field("string", "sender", "Sent by")
field("uint32", "session", "Session (tcp.stream of its first connection)")
field("uint32", "content_length", "Record content length")
field("uint32", "frame_count", "Frames")
field("bool", "early_data", "TLS early data (0-RTT)")
-- Every frame.
field("none", "frame", "Frame")
field("uint8", "frame.type", "Type", base.HEX, FRAME_NAMES)
-- Stream (0x02, 0x03).
field("uint32", "stream.id", "Stream ID")
field("uint64", "stream.offset", "Offset")
field("uint16", "stream.length", "Length")
field("bool", "stream.fin", "FIN")
field("bytes", "stream.data", "Data")
field("bool", "stream.retransmission", "Retransmission (bytes already sent on this session)")
-- ACK (0x04).
field("uint32", "ack.conn_id", "Connection ID")
field("uint64", "ack.highest", "Highest record sequence")
-- New Token (0x05).
field("uint32", "new_token.seq", "Sequence (Connection ID of the joining connection)")
field("string", "new_token.token", "Token (redacted)")
-- Connection Reset (0x06).
field("uint32", "conn_reset.conn_id", "Connection ID")
field("uint32", "conn_reset.tcp_stream", "That connection's tcp.stream")
-- New Address (0x07), Remove Address (0x08).
field("uint8", "new_address.id", "Address ID")
field("uint8", "new_address.version", "Version")
field("ipv4", "new_address.ipv4", "Address")
field("ipv6", "new_address.ipv6", "Address")
field("uint16", "new_address.port", "Port")
field("uint8", "remove_address.id", "Address ID")
-- Stream Change (0x09).
field("uint32", "stream_change.stream_id", "Next stream ID")
field("uint64", "stream_change.offset", "Next offset")
-- Join (0x10).
field("string", "join.token", "Token (redacted)")
field("uint32", "join.conn_id", "Connection ID (sequence of the New Token spent)")
-- Stream Reset (0x11), Max Stream Data (0x12).
field("uint32", "stream_reset.stream_id", "Stream ID")
field("uint64", "stream_reset.final_size", "Final size")
field("uint32", "stream_reset.error_code", "Error code", base.HEX, RESET_CODES)
field("uint32", "max_stream_data.stream_id", "Stream ID")
field("uint64", "max_stream_data.max_offset", "Maximum offset")
-- Extension frames (0x13..0x1C).
field("uint32", "user_timeout.ms", "Timeout (ms)")
field("uint32", "rtt.conn_id", "Connection ID")
field("uint64", "rtt.timestamp_us", "Timestamp (µs)")
field("uint32", "tcp_info.conn_id", "Connection ID")
field("uint32", "tcp_info.rtt_us", "RTT (µs)")
field("uint32", "tcp_info.rttvar_us", "RTT variance (µs)")
field("uint32", "tcp_info.cwnd", "Congestion window (segments)")
field("uint32", "tcp_info.total_retrans", "Total retransmissions")
field("uint64", "tcp_info.delivery_rate", "Delivery rate (B/s)")
field("uint64", "tcp_info.bytes_acked", "Bytes acked")
field("uint32", "address.conn_id", "Connection ID")
field("uint8", "address.version", "Version")
field("ipv4", "address.ipv4", "Address")
field("ipv6", "address.ipv6", "Address")
field("uint16", "address.port", "Port")
field("uint32", "rate_limit.conn_id", "Connection ID")
field("uint64", "rate_limit.bps", "Bytes per second (0 = no cap)")
field("uint32", "congestion_control.conn_id", "Connection ID")
field("uint8", "congestion_control.name_length", "Name length")
field("string", "congestion_control.name", "Name")
field("uint32", "stream_steer.conn_id", "Connection ID")
field("uint32", "stream_steer.stream_id", "Stream ID")
field("uint32", "path_priority.conn_id", "Connection ID")
field("uint8", "path_priority.backup", "Backup", base.DEC, { [0] = "regular path", [1] = "backup path" })
-- Rejoin (0x1E): a tokenless join; the session reference and the proof are secrets, redacted.
field("uint32", "rejoin.conn_id", "Connection ID")
field("string", "rejoin.session_ref", "Session Ref (redacted)")
field("string", "rejoin.proof", "Proof (redacted)")
-- Bytes the tail reader could not reach after an error.
field("bytes", "unparsed", "Unparsed bytes")

local ex_malformed = ProtoExpert.new("tcpls.malformed", "Malformed TCPLS frame (fatal decode_error, PROTOCOL.md §7.2)",
    expert.group.MALFORMED, expert.severity.ERROR)
local ex_unknown = ProtoExpert.new("tcpls.unknown_type", "Unknown TCPLS frame type (fatal decode_error)",
    expert.group.MALFORMED, expert.severity.ERROR)
local ex_role = ProtoExpert.new("tcpls.role", "Frame not allowed here (fatal unexpected_message, PROTOCOL.md §6.2)",
    expert.group.PROTOCOL, expert.severity.WARN)
local ex_empty = ProtoExpert.new("tcpls.empty", "Record without frames", expert.group.PROTOCOL, expert.severity.WARN)
local ex_retrans = ProtoExpert.new("tcpls.retransmission", "Stream bytes already sent on this session",
    expert.group.SEQUENCE, expert.severity.NOTE)
local ex_conn_reset = ProtoExpert.new("tcpls.conn_reset", "A connection of the session failed",
    expert.group.SEQUENCE, expert.severity.NOTE)
local ex_join = ProtoExpert.new("tcpls.join", "Join", expert.group.SEQUENCE, expert.severity.CHAT)
local ex_unknown_token = ProtoExpert.new("tcpls.unknown_token", "Join token not issued in this capture",
    expert.group.SEQUENCE, expert.severity.NOTE)
tcpls.experts = { ex_malformed, ex_unknown, ex_role, ex_empty, ex_retrans, ex_conn_reset, ex_join, ex_unknown_token }

local tcp_stream_field = Field.new("tcp.stream")
local handshake_type_field = Field.new("tls.handshake.type")
local alpn_field = Field.new("tls.handshake.extensions_alpn_str")

-- Capture-wide state, rebuilt on every (re)load of the capture. Wireshark dissects each packet
-- in order once (first pass) and again whenever the user selects it; what depends on earlier
-- packets is computed on the first pass and kept in `derived`, keyed by packet and record.
local conns, tokens, sessions, derived, syn_client
local current_packet, record_index
local function reset_state()
    syn_client = {} -- tcp.stream -> "addr:port" that sent the SYN
    conns = {}    -- tcp.stream -> { client = "addr:port", cid = n or nil, session = n, client_records = n }
    tokens = {}   -- full token hex -> { session = n, seq = n }
    sessions = {} -- session -> { ranges = { ["sender/stream"] = { {a, b}, ... } }, streams = { [cid] = tcp.stream } }
    derived = {}
    current_packet, record_index = nil, 0
end
tcpls.init = reset_state
reset_state()

-- The side that sent a connection's SYN is its client: a tap sees every SYN before the
-- connection's records are dissected (first pass).
local syn_tap = Listener.new("frame", "tcp.flags.syn == 1 && tcp.flags.ack == 0")
function syn_tap.packet(pinfo)
    local ts = tcp_stream_field()
    if ts then syn_client[ts.value] = tostring(pinfo.src) .. ":" .. tostring(pinfo.src_port) end
end

local function packet_has_handshake(wanted)
    for _, t in ipairs({ handshake_type_field() }) do
        if t.value == wanted then return true end
    end
    return false
end

local function redact(range)
    return range:bytes():tohex():lower():sub(1, 8) .. "… (" .. (range:len() - 4) .. " bytes redacted)"
end

-- Adds [a, b) to a sorted list of disjoint ranges; true when it overlaps bytes already there.
local function add_range(list, a, b)
    local overlap = false
    local merged = { a, b }
    local out = {}
    for _, r in ipairs(list) do
        if r[2] < merged[1] or r[1] > merged[2] then
            out[#out + 1] = r
        else
            if r[1] < b and a < r[2] then
                overlap = true
            end
            merged[1] = math.min(merged[1], r[1])
            merged[2] = math.max(merged[2], r[2])
        end
    end
    out[#out + 1] = merged
    table.sort(out, function(x, y) return x[1] < y[1] end)
    return overlap, out
end

-- Field parsers: each takes the tvb and the position just before the type byte, checks that
-- its fixed fields fit, and returns the frame's start and a table describing it (or nil, error).
local function need(pos, n)
    return pos >= n
end

local parse = {}
parse[0x00] = function(_, pos) return pos, {} end
parse[0x01] = parse[0x00]
local function parse_stream(tvb, pos)
    if not need(pos, 14) then return nil, "truncated" end
    local len = tvb(pos - 14, 2):uint()
    local offset = tvb(pos - 12, 8):uint64()
    if len > pos - 14 then return nil, "Length " .. len .. " exceeds the " .. (pos - 14) .. " bytes before it" end
    if (UInt64.max() - offset) < UInt64(len) then return nil, "offset + length exceeds 2^64 - 1" end
    local start = pos - 14 - len
    return start, { id = tvb(pos - 4, 4), offset = tvb(pos - 12, 8), length = tvb(pos - 14, 2),
        data = len > 0 and tvb(start, len) or nil, len = len, off = offset }
end
parse[0x02] = parse_stream
parse[0x03] = parse_stream
local function fixed(n, build)
    return function(tvb, pos)
        if not need(pos, n) then return nil, "truncated" end
        return pos - n, build(tvb, pos - n)
    end
end
parse[0x04] = fixed(12, function(t, s) return { highest = t(s, 8), cid = t(s + 8, 4) } end)
parse[0x05] = fixed(36, function(t, s) return { token = t(s, 32), seq = t(s + 32, 4) } end)
parse[0x06] = fixed(4, function(t, s) return { cid = t(s, 4) } end)
parse[0x08] = fixed(1, function(t, s) return { addr_id = t(s, 1) } end)
parse[0x09] = fixed(12, function(t, s) return { id = t(s, 4), offset = t(s + 4, 8) } end)
parse[0x10] = fixed(32, function(t, s) return { token = t(s, 32) } end)
parse[0x11] = fixed(16, function(t, s) return { code = t(s, 4), final = t(s + 4, 8), id = t(s + 12, 4) } end)
parse[0x12] = fixed(12, function(t, s) return { max = t(s, 8), id = t(s + 8, 4) } end)
parse[0x13] = fixed(4, function(t, s) return { ms = t(s, 4) } end)
parse[0x14] = fixed(12, function(t, s) return { ts = t(s, 8), cid = t(s + 8, 4) } end)
parse[0x15] = parse[0x14]
parse[0x16] = fixed(4, function(t, s) return { cid = t(s, 4) } end)
parse[0x17] = fixed(36, function(t, s)
    return { rtt = t(s, 4), rttvar = t(s + 4, 4), cwnd = t(s + 8, 4), retrans = t(s + 12, 4),
        rate = t(s + 16, 8), acked = t(s + 24, 8), cid = t(s + 32, 4) }
end)
parse[0x18] = parse[0x16]
parse[0x1A] = fixed(12, function(t, s) return { bps = t(s, 8), cid = t(s + 8, 4) } end)
parse[0x1C] = fixed(8, function(t, s) return { cid = t(s, 4), id = t(s + 4, 4) } end)
parse[0x1E] = fixed(52, function(t, s) return { cid = t(s, 4), sref = t(s + 4, 16), proof = t(s + 20, 32) } end)
parse[0x1D] = function(tvb, pos)
    if not need(pos, 5) then return nil, "truncated" end
    local backup = tvb(pos - 5, 1)
    if backup:uint() > 1 then return nil, "Backup " .. backup:uint() .. " is neither 0 nor 1" end
    return pos - 5, { backup = backup, cid = tvb(pos - 4, 4) }
end

-- Address fields read right to left: Version(8), then Address(32 or 128), then Port(16).
local function parse_address(tvb, pos)
    if not need(pos, 1) then return nil, nil, "truncated" end
    local version = tvb(pos - 1, 1)
    local v = version:uint()
    local alen = (v == 4 and 4) or (v == 6 and 16) or nil
    if not alen then return nil, nil, "Version " .. v .. " is neither 4 nor 6" end
    if not need(pos - 1, alen + 2) then return nil, nil, "truncated" end
    local start = pos - 1 - alen - 2
    return start, { version = version, addr = tvb(start + 2, alen), port = tvb(start, 2), v6 = v == 6 }
end
parse[0x07] = function(tvb, pos)
    if not need(pos, 1) then return nil, "truncated" end
    local start, a, err = parse_address(tvb, pos - 1)
    if not start then return nil, err end
    a.addr_id = tvb(pos - 1, 1)
    return start, a
end
parse[0x19] = function(tvb, pos)
    if not need(pos, 4) then return nil, "truncated" end
    local start, a, err = parse_address(tvb, pos - 4)
    if not start then return nil, err end
    a.cid = tvb(pos - 4, 4)
    return start, a
end
parse[0x1B] = function(tvb, pos)
    if not need(pos, 5) then return nil, "truncated" end
    local n = tvb(pos - 5, 1):uint()
    if n == 0 then return nil, "empty congestion control name" end
    if n > pos - 5 then return nil, "Name Length " .. n .. " exceeds the record" end
    local name = tvb(pos - 5 - n, n)
    for i = 0, n - 1 do
        local b = name(i, 1):uint()
        if b < 0x21 or b > 0x7E then return nil, "name is not ASCII graphic" end
    end
    return pos - 5 - n, { name = name, name_len = tvb(pos - 5, 1), cid = tvb(pos - 4, 4) }
end

-- Reads the record content from its end: returns the frames in wire order, and the error that
-- stopped the reader (with the number of bytes it could not reach), if any.
local function read_frames(tvb)
    local frames = {}
    local pos = tvb:len()
    while pos > 0 do
        local ftype = tvb(pos - 1, 1):uint()
        local parser = parse[ftype]
        if not parser then
            return frames, { kind = "unknown", type = ftype, pos = pos - 1 }
        end
        local start, body = parser(tvb, pos - 1)
        if not start then
            return frames, { kind = "malformed", type = ftype, pos = pos - 1, what = body }
        end
        table.insert(frames, 1, { type = ftype, start = start, stop = pos, body = body })
        pos = start
    end
    return frames, nil
end

local function summary(fr)
    local b, t = fr.body, fr.type
    if t == 0x02 or t == 0x03 then
        return string.format("Stream %d [%s, +%d)%s", b.id:uint(), tostring(b.off), b.len, t == 0x03 and " FIN" or "")
    elseif t == 0x04 then
        return string.format("ACK conn %d up to %s", b.cid:uint(), tostring(b.highest:uint64()))
    elseif t == 0x05 then
        return "New Token seq " .. b.seq:uint()
    elseif t == 0x06 then
        return "Connection Reset conn " .. b.cid:uint()
    elseif t == 0x09 then
        return string.format("Stream Change to %d at %s", b.id:uint(), tostring(b.offset:uint64()))
    elseif t == 0x10 then
        return "Join"
    elseif t == 0x11 then
        return string.format("Stream Reset %d code %d", b.id:uint(), b.code:uint())
    elseif t == 0x12 then
        return string.format("Max Stream Data %d to %s", b.id:uint(), tostring(b.max:uint64()))
    elseif t == 0x1D then
        return string.format("Path Priority conn %d %s", b.cid:uint(), b.backup:uint() == 1 and "backup" or "regular")
    elseif t == 0x1E then
        return "Rejoin conn " .. b.cid:uint()
    end
    return FRAME_NAMES[t]
end

-- First-pass bookkeeping for one record: the TCP connection's identity and the session state.
-- Which end of this TCP connection is the client: the SYN's sender when the capture has it;
-- otherwise the packet's handshake messages (a ServerHello comes from the server, a ClientHello
-- from the client); otherwise New Token (only servers send it); otherwise the client, which
-- speaks first (PROTOCOL.md §1.5).
local function client_of(tcp_stream, pinfo, frames)
    local src = tostring(pinfo.src) .. ":" .. tostring(pinfo.src_port)
    local dst = tostring(pinfo.dst) .. ":" .. tostring(pinfo.dst_port)
    if syn_client[tcp_stream] then return syn_client[tcp_stream] end
    if packet_has_handshake(2) then return dst end
    if packet_has_handshake(1) then return src end
    for _, fr in ipairs(frames) do
        if fr.type == 0x05 then return dst end
    end
    return src
end

local function derive(pinfo, frames)
    local d = { retrans = {}, notes = {} }
    local ts = tcp_stream_field()
    if not ts then
        -- Not over TCP (e.g. an exported PDU): no connection, session or sender to derive.
        return d
    end
    local tcp_stream = ts.value
    local from = tostring(pinfo.src) .. ":" .. tostring(pinfo.src_port)
    local conn = conns[tcp_stream]
    if not conn then
        conn = { client = client_of(tcp_stream, pinfo, frames), session = tcp_stream, cid = 0, client_records = 0 }
        conns[tcp_stream] = conn
    end
    d.sender = (from == conn.client) and "client" or "server"
    if d.sender == "client" then
        conn.client_records = conn.client_records + 1
        d.first_record = conn.client_records == 1
        -- A joining connection's first client record starts with Join (PROTOCOL.md §3).
        local first = frames[1]
        if d.first_record and first and first.type == 0x10 then
            local t = tokens[first.body.token:bytes():tohex()]
            if t then
                conn.session, conn.cid = t.session, t.seq
            else
                conn.cid = nil
                d.unknown_token = true
            end
        end
    end
    sessions[conn.session] = sessions[conn.session] or { ranges = {}, streams = {} }
    if conn.cid then sessions[conn.session].streams[conn.cid] = tcp_stream end
    local session = sessions[conn.session]
    d.tcp_stream, d.cid, d.session = tcp_stream, conn.cid, conn.session
    for i, fr in ipairs(frames) do
        local b = fr.body
        if (fr.type == 0x02 or fr.type == 0x03) and b.len > 0 then
            local key = d.sender .. "/" .. b.id:uint()
            local a = b.off:tonumber()
            local overlap, merged = add_range(session.ranges[key] or {}, a, a + b.len)
            session.ranges[key] = merged
            d.retrans[i] = overlap
        elseif fr.type == 0x05 then
            tokens[b.token:bytes():tohex()] = { session = conn.session, seq = b.seq:uint() }
        elseif fr.type == 0x06 then
            d.notes[i] = session.streams[b.cid:uint()]
        end
    end
    return d
end

local function add_frame(rec_tree, tvb, fr, i, d)
    local t, b = fr.type, fr.body
    local item = rec_tree:add(f.frame, tvb(fr.start, fr.stop - fr.start))
    item:set_text(summary(fr))
    item:add(f["frame.type"], tvb(fr.stop - 1, 1))
    if t == 0x02 or t == 0x03 then
        item:add(f["stream.id"], b.id)
        item:add(f["stream.offset"], b.offset)
        item:add(f["stream.length"], b.length)
        item:add(f["stream.fin"], tvb(fr.stop - 1, 1), t == 0x03)
        if b.data then item:add(f["stream.data"], b.data) end
        if d.retrans[i] then
            item:add(f["stream.retransmission"], tvb(fr.start, 0), true):set_generated()
            item:add_proto_expert_info(ex_retrans)
            item:append_text(" [retransmission]")
        end
    elseif t == 0x04 then
        item:add(f["ack.conn_id"], b.cid)
        item:add(f["ack.highest"], b.highest)
    elseif t == 0x05 then
        item:add(f["new_token.seq"], b.seq)
        item:add(f["new_token.token"], b.token, redact(b.token))
        if d.sender == "client" then item:add_proto_expert_info(ex_role, "New Token sent by a client") end
    elseif t == 0x06 then
        item:add(f["conn_reset.conn_id"], b.cid)
        if d.notes[i] then item:add(f["conn_reset.tcp_stream"], tvb(fr.start, 0), d.notes[i]):set_generated() end
        item:add_proto_expert_info(ex_conn_reset, "Connection " .. b.cid:uint() .. " of the session failed")
    elseif t == 0x07 then
        item:add(f["new_address.id"], b.addr_id)
        item:add(f["new_address.version"], b.version)
        item:add(b.v6 and f["new_address.ipv6"] or f["new_address.ipv4"], b.addr)
        item:add(f["new_address.port"], b.port)
    elseif t == 0x08 then
        item:add(f["remove_address.id"], b.addr_id)
    elseif t == 0x09 then
        item:add(f["stream_change.stream_id"], b.id)
        item:add(f["stream_change.offset"], b.offset)
    elseif t == 0x10 then
        item:add(f["join.token"], b.token, redact(b.token))
        if d.sender == "server" then
            item:add_proto_expert_info(ex_role, "Join sent by a server")
        elseif i ~= 1 or (d.sender and not d.first_record) then
            item:add_proto_expert_info(ex_role, "Join is not the first frame of the connection's first record")
        elseif d.cid then
            item:add(f["join.conn_id"], tvb(fr.start, 0), d.cid):set_generated()
            item:add_proto_expert_info(ex_join, "Join: this TCP connection is connection " .. d.cid ..
                " of the session of tcp.stream " .. d.session)
        end
        if d.unknown_token then item:add_proto_expert_info(ex_unknown_token) end
    elseif t == 0x11 then
        item:add(f["stream_reset.stream_id"], b.id)
        item:add(f["stream_reset.final_size"], b.final)
        item:add(f["stream_reset.error_code"], b.code)
    elseif t == 0x12 then
        item:add(f["max_stream_data.stream_id"], b.id)
        item:add(f["max_stream_data.max_offset"], b.max)
    elseif t == 0x13 then
        item:add(f["user_timeout.ms"], b.ms)
    elseif t == 0x14 or t == 0x15 then
        item:add(f["rtt.conn_id"], b.cid)
        item:add(f["rtt.timestamp_us"], b.ts)
    elseif t == 0x16 or t == 0x18 then
        item:add(t == 0x16 and f["tcp_info.conn_id"] or f["address.conn_id"], b.cid)
    elseif t == 0x17 then
        item:add(f["tcp_info.conn_id"], b.cid)
        item:add(f["tcp_info.rtt_us"], b.rtt)
        item:add(f["tcp_info.rttvar_us"], b.rttvar)
        item:add(f["tcp_info.cwnd"], b.cwnd)
        item:add(f["tcp_info.total_retrans"], b.retrans)
        item:add(f["tcp_info.delivery_rate"], b.rate)
        item:add(f["tcp_info.bytes_acked"], b.acked)
    elseif t == 0x19 then
        item:add(f["address.conn_id"], b.cid)
        item:add(f["address.version"], b.version)
        item:add(b.v6 and f["address.ipv6"] or f["address.ipv4"], b.addr)
        item:add(f["address.port"], b.port)
    elseif t == 0x1A then
        item:add(f["rate_limit.conn_id"], b.cid)
        item:add(f["rate_limit.bps"], b.bps)
    elseif t == 0x1B then
        item:add(f["congestion_control.conn_id"], b.cid)
        item:add(f["congestion_control.name_length"], b.name_len)
        item:add(f["congestion_control.name"], b.name)
    elseif t == 0x1C then
        item:add(f["stream_steer.conn_id"], b.cid)
        item:add(f["stream_steer.stream_id"], b.id)
    elseif t == 0x1D then
        item:add(f["path_priority.conn_id"], b.cid)
        item:add(f["path_priority.backup"], b.backup)
    elseif t == 0x1E then
        item:add(f["rejoin.conn_id"], b.cid)
        item:add(f["rejoin.session_ref"], b.sref, redact(b.sref))
        item:add(f["rejoin.proof"], b.proof, redact(b.proof))
    end
end

-- Set by the early-data heuristic for the record it hands over.
local early_data_record = false

function tcpls.dissector(tvb, pinfo, tree)
    local early = early_data_record
    early_data_record = false
    if pinfo.number ~= current_packet then
        current_packet, record_index = pinfo.number, 0
    end
    record_index = record_index + 1
    local frames, err = read_frames(tvb)
    local key = pinfo.number .. ":" .. record_index
    local d = derived[key]
    if not d then
        d = derive(pinfo, frames)
        derived[key] = d
    end

    pinfo.cols.protocol = "TCPLS"
    local parts = {}
    for _, fr in ipairs(frames) do
        if fr.type ~= 0x00 then parts[#parts + 1] = summary(fr) end
    end
    if #parts == 0 and #frames > 0 then parts[1] = "Padding" end
    if err then parts[#parts + 1] = "MALFORMED" end
    local who = d.sender and string.format("%s conn %s: ", d.sender == "client" and "C" or "S",
        d.cid and tostring(d.cid) or "?") or ""
    pinfo.cols.info:append(" [" .. who .. table.concat(parts, ", ") .. "]")

    local rec = tree:add(tcpls, tvb())
    if early then
        rec:add(f.early_data, tvb(0, 0), true):set_generated()
        rec:append_text(", 0-RTT")
    end
    if d.sender then
        rec:append_text(string.format(", %s, connection %s", d.sender, d.cid and tostring(d.cid) or "unknown"))
        if d.cid then rec:add(f.conn_id, tvb(0, 0), d.cid):set_generated() end
        rec:add(f.sender, tvb(0, 0), d.sender):set_generated()
        rec:add(f.session, tvb(0, 0), d.session):set_generated()
    end
    rec:append_text(string.format(", %d frames", #frames))
    rec:add(f.content_length, tvb(0, 0), tvb:len()):set_generated()
    rec:add(f.frame_count, tvb(0, 0), #frames):set_generated()
    if tvb:len() == 0 then
        rec:add_proto_expert_info(ex_empty)
    end
    if err then
        -- The frames before a bad one cannot be located (§7.2): show what is left as unparsed.
        if err.pos > 0 then rec:add(f.unparsed, tvb(0, err.pos)) end
        local bad = rec:add(f.frame, tvb(err.pos, 1))
        bad:set_text((FRAME_NAMES[err.type] or string.format("Unknown type 0x%02x", err.type)) .. " (malformed)")
        bad:add(f["frame.type"], tvb(err.pos, 1))
        if err.kind == "unknown" then
            bad:add_proto_expert_info(ex_unknown, string.format("Unknown frame type 0x%02x", err.type))
        else
            bad:add_proto_expert_info(ex_malformed, (FRAME_NAMES[err.type] or "?") .. ": " .. err.what)
        end
    end
    for i, fr in ipairs(frames) do
        add_frame(rec, tvb, fr, i, d)
    end
    return tvb:len()
end

DissectorTable.get("tls.alpn"):add("tcpls/1", tcpls)

-- TLS early data comes before the server's EncryptedExtensions, so the TLS dissector does not
-- know yet that the connection speaks tcpls/1 and offers the decrypted record to its heuristic
-- dissectors: take it when the same packet carries a ClientHello offering tcpls/1.
local function early_data_heuristic(tvb, pinfo, tree)
    if not packet_has_handshake(1) then return false end
    for _, alpn in ipairs({ alpn_field() }) do
        if alpn.value == "tcpls/1" then
            early_data_record = true
            tcpls.dissector(tvb, pinfo, tree)
            return true
        end
    end
    return false
end
tcpls:register_heuristic("tls", early_data_heuristic)
