'use strict';
// The result interfaces index.d.ts declares, read from the file itself, and a check that an answer
// has exactly their fields: every field it declares (optional ones may be absent) and no other.
// The interfaces are written one field a line (`  name?: type;`), which is all this reads.

const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const declarations = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8');

/** name → { parent, fields: Map(field → { optional, type }) } */
const interfaces = new Map();
{
  const lines = declarations.split('\n');
  for (let index = 0; index < lines.length; index++) {
    const header = /^export interface (\w+)(?: extends (\w+))? \{$/.exec(lines[index]);
    if (!header) continue;
    const fields = new Map();
    for (index++; lines[index] !== '}'; index++) {
      const field = /^ {2}(\w+)(\??): (.+);$/.exec(lines[index]);
      if (field) fields.set(field[1], { optional: field[2] === '?', type: field[3] });
    }
    interfaces.set(header[1], { parent: header[2], fields });
  }
}

/** What each DispatcherClient method resolves with, as declared: method → interface name. */
const methodResults = new Map([...declarations.matchAll(/^ {2}(\w+)\(.*\): Promise<(\w+)>;$/gm)].map((match) => [match[1], match[2]]));

function fieldsOf(name) {
  const declared = interfaces.get(name);
  assert.ok(declared, `index.d.ts declares no interface ${name}`);
  return new Map([...(declared.parent ? fieldsOf(declared.parent) : []), ...declared.fields]);
}

const checked = new Set();

/** Asserts `value` has the fields of interface `name`, and so on down the interfaces its fields name. */
function assertDeclared(name, value, where = name) {
  checked.add(name);
  assert.equal(typeof value, 'object', `${where}: not an object`);
  const fields = fieldsOf(name);
  const undeclared = Object.keys(value).filter((field) => !fields.has(field));
  const missing = [...fields].filter(([field, { optional }]) => !optional && !(field in value)).map(([field]) => field);
  assert.deepEqual({ undeclared, missing }, { undeclared: [], missing: [] }, `${where} (${name}): ${JSON.stringify(value)}`);
  for (const [field, { type }] of fields) {
    const inner = type.replace(/ \| null$/, '');
    const element = /^(\w+)\[\]$/.exec(inner);
    if (element && interfaces.has(element[1])) {
      value[field]?.forEach((item, index) => assertDeclared(element[1], item, `${where}.${field}[${index}]`));
    } else if (interfaces.has(inner) && value[field] !== null && value[field] !== undefined) {
      assertDeclared(inner, value[field], `${where}.${field}`);
    }
  }
}

module.exports = { interfaces, methodResults, assertDeclared, checked };
