-- 0007_native.sql - mixed stacks (probectl attach PID --native): native frames (C, C++,
-- libraries) stored beside Python frames in the same stacks. A native frame's func is its
-- symbol (C++ demangled), or its offset in the object ('0x1a2b') where no symbol covers it;
-- its file is the object's path ('[anon]': memory mapped from no file); line and first_line
-- are 0. Views stacks, sample_frames and function_stats show the kind as text.
ALTER TABLE frames ADD COLUMN kind INTEGER NOT NULL DEFAULT 0;  -- 0 python, 1 native, 2 kernel

-- attach --native was asked for (a daemon restart resumes the target the same way).
ALTER TABLE targets ADD COLUMN native INTEGER NOT NULL DEFAULT 0;
