package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/server"
	"github.com/historyd/historyd/internal/store"
)

// exampleServer serves historyd in the process for the examples, which have no *testing.T; stop
// shuts it down. A real program dials the address of a running historyd instead.
func exampleServer() (addr string, stop func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := server.New(nil)
	ex := exchange.Memory()
	server.RegisterExchange(srv, ex)
	server.RegisterHistory(srv, store.NewMemory())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	return lis.Addr().String(), func() {
		_ = srv.Shutdown(context.Background())
		<-served
		ex.Close()
	}
}

// A conversation: a branch with a system message, an instruction with context from its sender, an
// assistant's answer, and the chat messages a model would be sent.
func Example() {
	addr, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(addr, client.WithInsecure())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	created, err := c.History.CreateBranch(ctx, &historyv1.CreateBranchRequest{System: client.SystemInput("You are a careful calculator.")})
	if err != nil {
		panic(err)
	}
	branch := created.GetBranch().GetId()
	if _, err := c.Add(ctx, branch, client.Instruction("What is 30 + 12?", client.WithContext(map[string]int{"a": 30, "b": 12})), client.From("alice")); err != nil {
		panic(err)
	}
	if _, err := c.Add(ctx, branch, client.AssistantText("42")); err != nil {
		panic(err)
	}
	chat, err := c.History.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: branch})
	if err != nil {
		panic(err)
	}
	for _, m := range chat.GetMessages() {
		fmt.Printf("%s: %q\n", m.GetRole(), m.GetText())
	}
	// Output:
	// system: "You are a careful calculator."
	// user: "Instruction: What is 30 + 12?\nContext:\n- a: 30\n  b: 12"
	// assistant: "42"
}

// A tool call and its result, projected in the shape of OpenAI's Chat Completions messages.
func ExampleActionRequest() {
	addr, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(addr, client.WithInsecure())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	created, err := c.History.CreateBranch(ctx, &historyv1.CreateBranchRequest{})
	if err != nil {
		panic(err)
	}
	branch := created.GetBranch().GetId()
	call, err := c.Add(ctx, branch, client.ActionRequest("add", map[string]int{"a": 30, "b": 12}))
	if err != nil {
		panic(err)
	}
	if _, err := c.Add(ctx, branch, client.ActionOutput(call.GetId(), 42)); err != nil {
		panic(err)
	}
	chat, err := c.History.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: branch, Format: historyv1.ChatFormat_CHAT_FORMAT_OPENAI})
	if err != nil {
		panic(err)
	}
	// The tool call's id is the request's message id, random: print the JSON with it named.
	fmt.Println(strings.ReplaceAll(chat.GetMessagesJson(), call.GetId(), "<call id>"))
	// Output:
	// [{"role":"assistant","content":null,"tool_calls":[{"id":"<call id>","type":"function","function":{"name":"add","arguments":"{\"a\":30,\"b\":12}"}}]},{"role":"tool","tool_call_id":"<call id>","content":"42"}]
}

// Watching a branch from its first event: FromStart right after CreateBranch misses nothing.
func ExampleFromStart() {
	addr, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(addr, client.WithInsecure())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	created, err := c.History.CreateBranch(ctx, &historyv1.CreateBranchRequest{})
	if err != nil {
		panic(err)
	}
	branch := created.GetBranch().GetId()
	if _, err := c.Add(ctx, branch, client.Instruction("hello")); err != nil {
		panic(err)
	}
	for commit, err := range c.Watch(ctx, &historyv1.WatchBranchRequest{BranchId: branch}, client.FromStart()) {
		if err != nil {
			panic(err)
		}
		for _, e := range commit.GetEvents() {
			fmt.Println(e.GetSequence(), e.GetKind())
		}
		if commit.GetLastSequence() == 2 {
			break
		}
	}
	// Output:
	// 1 EVENT_KIND_BRANCH_CREATED
	// 2 EVENT_KIND_MESSAGE_ADDED
}

// Acknowledged delivery (issue 18): B handles its mail in a loop. A handler's error gives the
// message back, and it comes again with the next attempt; nil acknowledges it, and it is gone.
func ExampleClient_HandleInbox() {
	addr, stop := exampleServer()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	c, err := client.Dial(addr, client.WithInsecure())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	a, b := "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa", "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
	if _, err := c.Exchange.Register(ctx, &historyv1.RegisterRequest{OwnerId: a}); err != nil {
		panic(err)
	}
	// B's messages become dead letters after 3 failed attempts.
	if _, err := c.Exchange.Register(ctx, &historyv1.RegisterRequest{OwnerId: b, MaxAttempts: 3}); err != nil {
		panic(err)
	}
	content := `{"text": "hello B"}`
	if _, err := c.Exchange.Send(ctx, &historyv1.SendRequest{Sender: a, Recipient: client.Participant(b), ContentJson: &content}); err != nil {
		panic(err)
	}
	if _, err := c.Exchange.Collect(ctx, &historyv1.CollectRequest{OwnerId: a}); err != nil {
		panic(err)
	}

	err = c.HandleInbox(ctx, b, func(ctx context.Context, m *historyv1.LeasedMessage) error {
		fmt.Printf("attempt %d: %s\n", m.GetAttempt(), m.GetMessage().GetGeneric().GetContentJson())
		if m.GetAttempt() == 1 {
			return errors.New("not yet") // nacked: it comes back
		}
		cancel() // HandleInbox acknowledges this one, then returns
		return nil
	})
	fmt.Println("HandleInbox:", err)
	left, err := c.Exchange.Receive(context.Background(), &historyv1.ReceiveRequest{OwnerId: b})
	if err != nil {
		panic(err)
	}
	fmt.Println("left in B's inboxes:", len(left.GetMessages()))
	// Output:
	// attempt 1: {"text":"hello B"}
	// attempt 2: {"text":"hello B"}
	// HandleInbox: <nil>
	// left in B's inboxes: 0
}
