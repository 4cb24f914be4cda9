-- Routes the joins of a TCPLS farm to the node that holds their session, from the join's TLS
-- server name (SNI), without per-connection state (docs/TUNNEL.md, "Farm", mode b).
--
-- A farm node mints each join token as  label (16 bytes) || secret (16 bytes),  where
--   label = nonce (8 random bytes) || HMAC-SHA256(route key, "tcpls farm route" || nonce || node)[0..8]
-- and a client started with `--join-sni-domain DOMAIN` sends its joins with the server name
-- `<hex(label)>.DOMAIN`. This script finds the node whose MAC matches (HMAC from haproxy's own
-- OpenSSL `hmac` converter; no cryptography is written here) and returns its number; anything
-- else (a new session's name, a forged label) returns nothing and is balanced as usual.
-- The analysis of what a passive observer learns is in docs/SECURITY.md.
--
-- Configuration (haproxy.cfg, global section):
--   setenv TCPLS_FARM_ROUTE_KEY_FILE /etc/tcpls/route.key   -- 64 hex digits, the nodes' --farm-route-key
--   setenv TCPLS_FARM_NODES 3                               -- nodes are numbered 1..N (--farm-node)
--   lua-load /usr/share/tcpls/tcpls-farm.lua
-- and in the backend:  use-server node1 if { lua.tcpls_join_node -m int 1 }  (one per node).

local CONTEXT = "tcpls farm route"

local function unhex(s)
    if #s % 2 ~= 0 or s:find("[^0-9a-fA-F]") then
        return nil
    end
    return (s:gsub("..", function(pair) return string.char(tonumber(pair, 16)) end))
end

local function read_key()
    local path = os.getenv("TCPLS_FARM_ROUTE_KEY_FILE")
    if not path then
        error("tcpls-farm.lua: set TCPLS_FARM_ROUTE_KEY_FILE (setenv in haproxy's global section)")
    end
    local f = io.open(path, "r")
    if not f then
        error("tcpls-farm.lua: cannot read the route key file " .. path)
    end
    local text = f:read("*a")
    f:close()
    local hex = text:match("^%s*(%x+)%s*$")
    local key = hex and #hex == 64 and unhex(hex)
    if not key then
        error("tcpls-farm.lua: " .. path .. " must hold one key of 64 hex digits (openssl rand -hex 32)")
    end
    return key
end

local KEY = read_key()
local NODES = tonumber(os.getenv("TCPLS_FARM_NODES") or "")
if not NODES or NODES < 1 or NODES > 255 then
    error("tcpls-farm.lua: set TCPLS_FARM_NODES to the number of nodes (1 to 255)")
end

core.register_fetches("tcpls_join_node", function(txn)
    local sni = txn.f:req_ssl_sni()
    if not sni then
        return nil
    end
    local label = unhex(sni:match("^(%x+)%.") or "")
    if not label or #label ~= 16 then
        return nil
    end
    local nonce, mac = label:sub(1, 8), label:sub(9, 16)
    local key_b64 = txn.c:base64(KEY)
    for node = 1, NODES do
        local full = txn.c:hmac(CONTEXT .. nonce .. string.char(node), "sha256", key_b64)
        if full and full:sub(1, 8) == mac then
            return node
        end
    end
    return nil
end)
