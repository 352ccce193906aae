package postgres

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/parleychat/parley/internal/store"
)

func TestZPhases(t *testing.T) {
	o := Options{}
	s := openTest(t, t.TempDir(), o)
	if os.Getenv("ZCUSTOM") != "" {
		s.Close()
		u := s.opts.URL + "&plan_cache_mode=auto"
		o.URL = u
		var err error
		s, err = Open(context.Background(), Options{URL: u})
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	err := s.Update(ctx, func(tx store.Tx) error {
		for i := range 128 {
			if err := tx.CreateUser(ctx, store.User{ID: fmt.Sprint("u", i), Name: "x", TokenGen: 1}); err != nil {
				return err
			}
		}
		for i := range 64 {
			c := fmt.Sprint("c", i)
			if err := tx.CreateConversation(ctx, store.Conversation{ID: c, Type: "direct", MembersCount: 2}); err != nil {
				return err
			}
			for j := range 2 {
				if err := tx.PutMember(ctx, store.Member{ConvID: c, UserID: fmt.Sprint("u", 2*i+j), Ordinal: int64(j + 1)}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("READY")
	var buf [1]byte
	os.Stdin.Read(buf[:])
	n := 64
	var t3 time.Duration
	const rounds = 300
	for r := range rounds {
		var reqs []*appendReq
		for i := range n {
			reqs = append(reqs, &appendReq{ctx: ctx, m: store.Message{ConvID: fmt.Sprint("c", i), SenderID: fmt.Sprint("u", 2*i),
				MsgID: fmt.Sprint("m", n, r, i), ClientMsgID: fmt.Sprint("cm", n, r, i), Content: []byte(`{"text":"hi"}`), CreatedAt: 1}, done: make(chan struct{})})
		}
		a := time.Now()
		b, err := s.ap.try(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		_ = b
		t3 += time.Since(a)
	}
	fmt.Printf("batch %v\n", t3/rounds)
	fmt.Println("DONE")
	os.Stdin.Read(buf[:])
}
