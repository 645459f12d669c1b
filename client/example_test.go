package client_test

import (
	"context"
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
