-- 0008_thread_os_name.sql - threads.name is the name the threading module gives a thread
-- ("MainThread", "Thread-3 (worker)", the program's own), read out of the process when the
-- thread is first sampled; os_name is the kernel's (/proc/PID/task/TID/comm, what
-- pthread_setname_np set, else the program's name). A thread threading does not know (a C
-- library's, a native-only one) has its OS name in both.
ALTER TABLE threads ADD COLUMN os_name TEXT;
