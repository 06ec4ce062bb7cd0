package config

import "github.com/sluice-dev/sluice/tasks"

// fieldNames returns the placeholders a key or member template of channel
// may name: tasks.FieldNames of the channel's task type, the one registry.
func fieldNames(channel string) []string {
	taskType, ok := tasks.ChannelTaskType(channel)
	if !ok {
		return nil
	}
	f, _ := tasks.FieldNames(taskType)
	return f
}

// costFieldNames returns the fields a rule of channel may name as its cost
// (`cost: segments`), or nil.
func costFieldNames(channel string) []string {
	taskType, ok := tasks.ChannelTaskType(channel)
	if !ok {
		return nil
	}
	return tasks.CostFieldNames(taskType)
}
