// Package rules is the one home of Sluice's limit rules, between throttle
// and tasks below and config and worker above: a Rule is a throttle.Limit
// with the key template that picks the limited identifier from a task
// ("whatsapp:pair:{phone_number_id}:{to}"), a Distinct limit's member
// template ("{to}") and a cost.
//
// It holds the only template parser (ParseKey, ParseMember; Template renders
// a key from task fields and matches a concrete key or a "prefix*" pattern
// back to its template), rule validation whose errors name the field
// (Rule.Check, FieldError), and the step from a task's fields to the
// throttle.Requests of its send (Set.Requests). config validates a file's
// rules with it, the worker compiles each channel's rules with it, and the
// CLI matches keys and patterns to rules with it. The fields a template may
// name come from the tasks registry (tasks.FieldNames).
package rules
