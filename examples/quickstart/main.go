// Command quickstart is the short tour of the Go client (issue 19: "the 30-line program"): it
// creates a branch, watches it in a goroutine from its first event, adds an instruction and a
// response, and prints the chat projection. Start a server with `make run`, then:
//
//	go run ./examples/quickstart            # HISTORYD_ADDR=host:port for another server
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"os"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

func main() {
	ctx := context.Background()
	c, err := client.Dial(cmp.Or(os.Getenv("HISTORYD_ADDR"), "127.0.0.1:50051"), client.WithInsecure())
	check(err)
	defer c.Close()
	created, err := c.History.CreateBranch(ctx, &historyv1.CreateBranchRequest{System: client.SystemInput("You are a careful calculator.")})
	check(err)
	branch := created.GetBranch().GetId()

	watched := make(chan struct{})
	go func() { // prints each change as it is committed; ends after the third event
		defer close(watched)
		for commit, err := range c.Watch(ctx, &historyv1.WatchBranchRequest{BranchId: branch}, client.FromStart()) {
			check(err)
			for _, e := range commit.GetEvents() {
				fmt.Println("event", e.GetSequence(), e.GetKind())
			}
			if commit.GetLastSequence() >= 3 {
				return
			}
		}
	}()
	_, err = c.Add(ctx, branch, client.Instruction("What is 30 + 12?", client.WithContext(map[string]int{"a": 30, "b": 12})), client.From("alice"))
	check(err)
	_, err = c.Add(ctx, branch, client.AssistantText("30 + 12 = 42."))
	check(err)
	<-watched

	chat, err := c.History.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: branch})
	check(err)
	for _, m := range chat.GetMessages() {
		fmt.Printf("%s: %q\n", m.GetRole(), m.GetText())
	}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
