package p_test

// External is in the external test package.
//
//kinesis:message stream=external
type External struct{ ID int }
