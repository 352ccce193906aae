package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley/internal/parleytest"
	"github.com/parleychat/parley/internal/server"
	"github.com/parleychat/parley/internal/store/postgres/pgtest"
)

// engines are the storage engines every engine-agreement test runs against; postgres is
// skipped when no test database answers (pgtest).
var engines = []string{"pebble", "sqlite", "postgres"}

// withEngine makes the node store in engine, whatever PARLEY_TEST_STORE says.
func withEngine(t testing.TB, engine string) func(*server.Config) {
	return func(cfg *server.Config) {
		cfg.Engine, cfg.PostgresURL, cfg.BlobStore = engine, "", ""
		if engine == "postgres" {
			cfg.PostgresURL, cfg.BlobStore = pgtest.SchemaURL(t, cfg.Data), parleytest.SharedBlobs(cfg.Data)
		}
	}
}

// badInput is one request every engine must refuse with the same 400, before it stores
// anything. path and body may hold {conv} and {group}, the ids of the test's direct and
// group conversations; admin sends it with the admin secret instead of alice's token.
type badInput struct {
	name, method, path, body string
	admin                    bool
}

// nuls is a NUL character as it can reach the server inside a JSON string: as the \u0000
// escape, which decodes to a NUL byte, and as the byte itself, which JSON refuses.
var nuls = []struct{ name, s string }{{"escaped", `\u0000`}, {"raw", "\x00"}}

// badInputs returns the table: a NUL in every string field a store keeps, and integers
// beyond their documented ranges (content_type above 2^31-1 was acked on PostgreSQL and
// read back truncated, while the embedded engines kept it).
func badInputs() []badInput {
	var in []badInput
	for i, nul := range nuls {
		send := func(id, rest string) string {
			return fmt.Sprintf(`{"conv_id":"{conv}","client_msg_id":"nul-%d-%s",%s}`, i, id, rest)
		}
		in = append(in,
			badInput{"user name " + nul.name, "POST", "/v1/admin/users", `{"user_id":"mallory","name":"mal` + nul.s + `lory"}`, true},
			badInput{"group name " + nul.name, "POST", "/v1/conversations", `{"type":"group","name":"evil` + nul.s + `","members":["bob"]}`, false},
			badInput{"rename " + nul.name, "PATCH", "/v1/conversations/{group}", `{"name":"renamed` + nul.s + `"}`, false},
			badInput{"message text " + nul.name, "POST", "/v1/messages", send("text", `"content_type":1,"content":{"text":"hi`+nul.s+`"}`), false},
			badInput{"content key " + nul.name, "POST", "/v1/messages", send("key", `"content_type":1,"content":{"te`+nul.s+`xt":"hi"}`), false},
			badInput{"content string " + nul.name, "POST", "/v1/messages", send("string", `"content_type":1,"content":"`+nul.s+`"`), false},
			badInput{"extra value " + nul.name, "POST", "/v1/messages", send("extra", `"content_type":1,"content":"x","extra":{"k":"`+nul.s+`"}`), false},
			badInput{"push token " + nul.name, "PUT", "/v1/push/device", `{"provider":"fcm","token":"tok` + nul.s + `"}`, false},
			badInput{"push locale " + nul.name, "PUT", "/v1/push/device", `{"provider":"fcm","token":"tok","locale":"en` + nul.s + `"}`, false},
		)
	}
	return append(in,
		badInput{"content_type 2^31", "POST", "/v1/messages", `{"conv_id":"{conv}","client_msg_id":"ct-31","content_type":2147483648,"content":"x"}`, false},
		badInput{"content_type 2^32+1", "POST", "/v1/messages", `{"conv_id":"{conv}","client_msg_id":"ct-32","content_type":4294967297,"content":"x"}`, false},
		badInput{"content_type 2^53-1", "POST", "/v1/messages", `{"conv_id":"{conv}","client_msg_id":"ct-53","content_type":9007199254740991,"content":"x"}`, false},
	)
}

// TestAttackBadInputEveryEngine sends the bad-input table to a node of each engine over
// HTTP, and its sends again as WebSocket ops: every engine answers each with the same 400
// body, word for word, and stores nothing (no user, no group, no rename, no message, no
// push registration). Before the fix PostgreSQL answered a NUL in a group name with a 503
// that quoted the SQL error, and acked a content_type of 2^31 that it then read back
// truncated, while Pebble and SQLite stored both.
func TestAttackBadInputEveryEngine(t *testing.T) {
	answers := map[string]map[string]string{} // engine -> case -> answer
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			answers[engine] = badInputAnswers(t, engine)
		})
	}
	var first string
	for _, engine := range engines {
		if answers[engine] == nil {
			continue
		}
		if first == "" {
			first = engine
			continue
		}
		for name, want := range answers[first] {
			if got := answers[engine][name]; got != want {
				t.Errorf("%s: %s answers %s, %s answers %s", name, engine, got, first, want)
			}
		}
	}
}

// badInputAnswers runs the table on a node of engine, checks that each case is a 400 and
// that nothing was stored, and returns each case's answer.
func badInputAnswers(t *testing.T, engine string) map[string]string {
	n := start(t, withEngine(t, engine))
	alice := n.user(t, "alice")
	n.user(t, "bob")
	conv := n.direct(t, alice, "bob")["conv_id"].(string)
	group := n.group(t, alice, "team", false, "bob")["conv_id"].(string)
	ids := strings.NewReplacer("{conv}", conv, "{group}", group)
	ws := n.dial(t, n.Token(t, "alice", "ws"), -1)
	convsBefore, cursorBefore := len(n.listed(t, alice)), n.latest(t, alice)

	got := map[string]string{}
	for i, c := range badInputs() {
		body := ids.Replace(c.body)
		t.Run(c.name, func(t *testing.T) {
			token := alice
			if c.admin {
				token = n.AdminSecret
			}
			r := n.fail(t, http.StatusBadRequest, c.method, ids.Replace(c.path), token, body)
			got[c.name] = string(r.raw)
			if c.path != "/v1/messages" {
				return
			}
			id := fmt.Sprintf("bad%d", i)
			ws.write(`{"id":"` + id + `","op":"send",` + body[1:])
			reply := ws.reply()
			got[c.name+" over WebSocket"] = fmt.Sprint(reply["error"])
			if !json.Valid([]byte(body)) { // a raw NUL: the frame is no JSON, so it has no id
				wantFields(t, "error reply", reply, map[string]any{"id": "", "code": http.StatusBadRequest})
				return
			}
			wantFields(t, "error reply", reply, map[string]any{"id": id, "code": http.StatusBadRequest})
			if want := object(t, r.raw)["error"]; reply["error"] != want {
				t.Fatalf("the send op answers %q, the HTTP call %q", reply["error"], want)
			}
		})
	}
	ws.ping() // the connection survived every refusal

	n.fail(t, http.StatusNotFound, "GET", "/v1/users/mallory", alice, nil)
	if b := n.brief(t, alice, group); b["name"] != "team" {
		t.Fatalf("the group's name is %q after refused renames", b["name"])
	}
	if got := len(n.listed(t, alice)); got != convsBefore {
		t.Fatalf("alice has %d conversations after refused creations, had %d", got, convsBefore)
	}
	if h := n.history(t, alice, conv, 0); len(h) != 0 {
		t.Fatalf("history holds %s after refused sends", show(h))
	}
	if cur := n.latest(t, alice); cur != cursorBefore {
		t.Fatalf("alice's log moved from %d to %d: a refused request reached it", cursorBefore, cur)
	}
	if ds := arr(t, n.ok(t, "GET", "/v1/push/devices", alice, nil)["devices"]); len(ds) != 0 {
		t.Fatalf("push registrations %s after refused ones", show(ds))
	}
	return got
}

// TestStoreErrorNamesNoSQL breaks a PostgreSQL node's schema under it (its conversations
// table is dropped) and checks that the calls that then fail answer a generic 503 whose
// body names nothing of the database: not its error, not the table, not the statement.
// Before the fix the 503 carried the driver's text, `relation "conversations" does not
// exist (SQLSTATE 42P01)`.
func TestStoreErrorNamesNoSQL(t *testing.T) {
	var dbURL string
	n := start(t, withEngine(t, "postgres"), func(cfg *server.Config) { dbURL = cfg.PostgresURL })
	alice := n.user(t, "alice")
	n.user(t, "bob")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP TABLE conversations`); err != nil {
		t.Fatal(err)
	}

	calls := []struct{ method, path, body string }{
		{"POST", "/v1/conversations", `{"type":"group","name":"team","members":["bob"]}`},
		{"GET", "/v1/conversations", ""},
		{"GET", "/healthz", ""},
	}
	for _, c := range calls {
		var body any
		if c.body != "" {
			body = c.body
		}
		r := n.fail(t, http.StatusServiceUnavailable, c.method, c.path, alice, body)
		for _, leak := range []string{"SQLSTATE", "relation", "conversations", "postgres", "42P01", "select", "insert"} {
			if strings.Contains(strings.ToLower(string(r.raw)), strings.ToLower(leak)) {
				t.Errorf("%s %s: the 503 names %q: %s", c.method, c.path, leak, r.raw)
			}
		}
		wantReason(t, object(t, r.raw), "store unavailable")
	}
}
