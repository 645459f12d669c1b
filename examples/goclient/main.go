// Command goclient is a conversation kept by historyd, written with the Go client
// (github.com/historyd/historyd/client): a branch with a system message, an instruction, an
// assistant response from a raw provider response, a tool call and its result, the chat messages a
// model would be sent, then the branch's events replayed by a watch (which would resume by itself
// after a disconnect). Start a server with `make run`, then:
//
//	go run ./examples/goclient [-addr 127.0.0.1:50051]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "historyd's address (plaintext)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "goclient:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string) error {
	c, err := client.Dial(addr, client.WithInsecure())
	if err != nil {
		return err
	}
	defer c.Close()

	created, err := c.History.CreateBranch(ctx, &historyv1.CreateBranchRequest{
		User:   ptr("alice"),
		System: &historyv1.SystemInput{SystemMessage: ptr("You are a careful calculator.")},
	})
	if err != nil {
		return fmt.Errorf("create branch: %w", err)
	}
	branch := created.GetBranch().GetId()
	fmt.Println("branch", branch)

	// Every AddMessage is retried on UNAVAILABLE with one request_id, so it is applied once.
	if _, err := c.History.AddMessage(ctx, &historyv1.AddMessageRequest{
		BranchId:  branch,
		Sender:    client.Participant("alice"),
		Recipient: client.Participant("assistant"),
		Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
			InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "What is 30 + 12?"},
			ContextJson:      []string{`{"a": 30, "b": 12}`}, // any-JSON fields are JSON text
		}},
	}); err != nil {
		return fmt.Errorf("instruction: %w", err)
	}
	if _, err := c.History.AddMessage(ctx, &historyv1.AddMessageRequest{
		BranchId: branch,
		Input: &historyv1.AddMessageRequest_AssistantResponse{AssistantResponse: &historyv1.AssistantResponseInput{
			Response: &historyv1.AssistantResponseInput_RawResponseJson{
				RawResponseJson: `{"choices": [{"message": {"role": "assistant", "content": "I will call add."}}]}`,
			},
		}},
	}); err != nil {
		return fmt.Errorf("assistant response: %w", err)
	}
	call, err := c.History.AddMessage(ctx, &historyv1.AddMessageRequest{
		BranchId: branch,
		Input: &historyv1.AddMessageRequest_ActionRequest{ActionRequest: &historyv1.ActionRequestInput{
			Function: "add", ArgumentsJson: `{"a": 30, "b": 12}`,
		}},
	})
	if err != nil {
		return fmt.Errorf("tool call: %w", err)
	}
	if _, err := c.History.CreateActionResponse(ctx, &historyv1.CreateActionResponseRequest{
		BranchId: branch, ActionRequestId: call.GetMessage().GetId(), OutputJson: ptr("42"),
	}); err != nil {
		return fmt.Errorf("tool result: %w", err)
	}

	// Errors carry a reason to switch on.
	_, err = c.History.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: branch, MessageId: "00000000-0000-4000-8000-000000000000"})
	if client.Reason(err) == historyv1.ErrorReason_ERROR_REASON_MESSAGE_NOT_FOUND {
		fmt.Println("no such message, as expected")
	}

	fmt.Println("messages:")
	for m, err := range c.Messages(ctx, &historyv1.ListMessagesRequest{BranchId: branch, PageSize: 2}) {
		if err != nil {
			return fmt.Errorf("list: %w", err)
		}
		fmt.Printf("  %d %s %s\n", m.GetSequence(), m.GetRole(), m.GetId())
	}

	chat, err := c.History.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: branch})
	if err != nil {
		return fmt.Errorf("chat messages: %w", err)
	}
	fmt.Println("chat messages:")
	for _, m := range chat.GetMessages() {
		fmt.Printf("  [%s] %q\n", m.GetRole(), m.GetText())
	}

	// Every change was an event: replay them from the start (after sequence 0) up to the head. A
	// watch left open would go on with live events, resuming by itself after a disconnect.
	fmt.Println("events:")
	head := chat.GetHeadSequence()
	for commit, err := range c.Watch(ctx, &historyv1.WatchBranchRequest{BranchId: branch, AfterSequence: ptr(uint64(0))}) {
		if err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		for _, ev := range commit.GetEvents() {
			fmt.Printf("  %d %s\n", ev.GetSequence(), ev.GetKind())
		}
		if commit.GetLastSequence() >= head {
			break
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
