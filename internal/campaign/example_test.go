package campaign_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/sluice-dev/sluice/internal/campaign"
)

func ExampleRead() {
	in := "\ufeffto,name,order_id\r\n" +
		"+1 (202) 555-0123,Ava,ORD-100123\r\n" +
		"\r\n" +
		"+1555,Noah,ORD-100124\r\n" +
		"+12025550123,Ava,ORD-100123\r\n" +
		"+12025550123,Ava,ORD-100125\r\n"
	res, err := campaign.Read(strings.NewReader(in), campaign.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, row := range res.Rows {
		msg, _ := campaign.Render("Hi {name}, order {order_id} has shipped", row)
		fmt.Printf("line %d: %s %q\n", row.Line, row.To, msg)
	}
	for _, r := range res.Rejects {
		fmt.Printf("line %d: rejected: %s\n", r.Line, r.Reason)
	}
	// Output:
	// line 2: +12025550123 "Hi Ava, order ORD-100123 has shipped"
	// line 6: +12025550123 "Hi Ava, order ORD-100125 has shipped"
	// line 4: rejected: to: "+1555" is not a valid E.164 phone number
	// line 5: rejected: duplicate of line 2
}

func ExampleRead_missingColumn() {
	_, err := campaign.Read(strings.NewReader("phone,name\n+12025550123,Ava\n"), campaign.Options{})
	fmt.Println(err)
	// Output:
	// line 1: missing required column "to" (have: phone, name)
}

func ExampleWriteRejects() {
	res, _ := campaign.Read(strings.NewReader("to,name\nnot-a-number,Ava\n+12025550123\n"), campaign.Options{})
	campaign.WriteRejects(os.Stdout, res.Columns, res.Rejects)
	// Output:
	// line,reason,to,name
	// 2,"to: ""not-a-number"" is not a valid E.164 phone number",not-a-number,Ava
	// 3,"has 1 field, want 2; the line was: +12025550123",,
}

func ExampleIdempotencyKey() {
	res, _ := campaign.Read(strings.NewReader("to,name\n+12025550123,Ava\n"), campaign.Options{})
	fmt.Println(campaign.IdempotencyKey("spring-sale", "sms", res.Rows[0], res.Columns))
	// Output:
	// sms-b39c1fea3963499c17749843ba9fd73f
}
