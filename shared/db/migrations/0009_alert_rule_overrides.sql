-- Alert rules an admin set through the API (PUT /api/v1/alert-rules), which the alerter
-- merges over its rules file; and the rules the alerter has in force, for the API to show.
CREATE TABLE alerter.rule_overrides (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    overrides jsonb NOT NULL,         -- {} after a reset: the file alone
    version integer NOT NULL,
    updated_by text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE alerter.rules_in_force (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    rules jsonb NOT NULL,
    file text,                        -- the rules file, when one is configured
    problem text,                     -- a refused file edit or override (what was in force stays)
    overrides_version integer NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
