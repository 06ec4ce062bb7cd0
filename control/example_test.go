package control_test

import (
	"fmt"

	"github.com/sluice-dev/sluice/control"
)

func ExampleClaimKey() {
	fmt.Println(control.ClaimKey("sluice", "order-7"))
	// Output: sluice:_idem:order-7
}

func ExampleDeliveryCountersKey() {
	group := control.CampaignGroup("acme", "spring-sale")
	fmt.Println(control.DeliveryCountersKey("sluice", group))
	fmt.Println(control.DeliveryRecordKey("sluice", "01JD3"))
	fmt.Println(control.DeliveryIndexKey("sluice", "sms", "SM1"))
	fmt.Println(control.FirstFailureKey("sluice", "sms", "01JD3"))
	// Output:
	// sluice:{_delivery}:campaign:4:acme:spring-sale
	// sluice:{_delivery}:task:01JD3
	// sluice:{_delivery}:msg:sms:SM1
	// sluice:_failed:sms:01JD3
}
