package tasks_test

import (
	"errors"
	"fmt"

	"github.com/sluice-dev/sluice/tasks"
)

func ExampleNewWhatsAppSendTask() {
	task, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{
		PhoneNumberID: "106540352242922",
		To:            "+1 (202) 555-0123",
		Template: &tasks.Template{
			Name:       "order_update",
			Language:   "en_US",
			Parameters: []string{"Ava", "ORD-100123"},
		},
		IdempotencyKey: "order-100123-shipped",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(task.Type())
	fmt.Println(string(task.Payload()))
	// Output:
	// whatsapp:send
	// {"v":1,"phone_number_id":"106540352242922","to":"+12025550123","template":{"name":"order_update","language":"en_US","parameters":["Ava","ORD-100123"]},"idempotency_key":"order-100123-shipped"}
}

func ExampleNewWhatsAppSendTask_media() {
	task, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{
		PhoneNumberID: "106540352242922",
		To:            "+12025550123",
		Media: &tasks.Media{
			Type:     tasks.MediaDocument,
			Link:     "https://cdn.example.com/invoices/1042.pdf",
			Caption:  "Your invoice",
			Filename: "invoice-1042.pdf",
		},
		ReplyTo:        "wamid.HBgLMTIwMjU1NTAxMjMVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA",
		IdempotencyKey: "invoice-1042",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(task.Payload()))
	_, err = tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{
		PhoneNumberID: "106540352242922",
		To:            "+12025550123",
		Media:         &tasks.Media{Type: tasks.MediaAudio, ID: "1166846181421424", Caption: "Listen"},
	})
	fmt.Println(err)
	// Output:
	// {"v":1,"phone_number_id":"106540352242922","to":"+12025550123","media":{"type":"document","link":"https://cdn.example.com/invoices/1042.pdf","caption":"Your invoice","filename":"invoice-1042.pdf"},"reply_to":"wamid.HBgLMTIwMjU1NTAxMjMVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA","idempotency_key":"invoice-1042"}
	// media.caption: audio messages have no caption (WhatsApp takes one on image, video and document)
}

func ExampleNewWhatsAppSendTask_invalid() {
	_, err := tasks.NewWhatsAppSendTask(tasks.WhatsAppSend{
		PhoneNumberID: "106540352242922",
		To:            "+1555",
		Text:          "Your order shipped",
	})
	fmt.Println(err)
	// Output:
	// to: "+1555" is not a valid E.164 phone number
}

func ExampleDecodeWhatsAppSend() {
	_, err := tasks.DecodeWhatsAppSend([]byte(`{"v":2,"phone_number_id":"1","to":"+12025550123","text":"hi"}`))
	fmt.Println(err)
	fmt.Println(errors.Is(err, tasks.ErrMalformed))
	// Output:
	// payload: v: unsupported version 2 (want 1)
	// true
}

func ExampleSMSSend_Fields() {
	p := tasks.SMSSend{MessagingServiceSID: "MG0123456789abcdef0123456789abcdef", To: "+12025550123",
		Body: "Your order has shipped and will arrive on Tuesday between 9 and 12. Reply STOP to opt out of delivery updates, or HELP for help. Track it at https://example.com/t/123"}
	fmt.Println(p.Fields()["sender"])
	fmt.Println(p.Fields()["segments"]) // 170 GSM-7 characters: 2 segments
	names, _ := tasks.FieldNames(tasks.TypeSMSSend)
	fmt.Println(names)
	// Output:
	// MG0123456789abcdef0123456789abcdef
	// 2
	// [from messaging_service_sid to sender account_sid segments]
}
